"""The swarm: goals, runs, candidates and their evidence, orchestration, pages and API."""
