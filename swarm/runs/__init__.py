"""Runs: the generation loop (propose, evaluate, store, publish, advance), dispatch to each target's
queue by task name, engineers' directions, run events, results, baselines and noise floors, and
periodic recovery."""
