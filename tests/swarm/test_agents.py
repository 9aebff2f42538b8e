"""Each agent against the agent contract, plus what is specific to each."""

from swarm.agents import Observation, make_agent
from tests.contracts.agent_contract import SPACE, AgentContract, landscape, median_best, search, view


class TestRandomAgent(AgentContract):
    agent_kind = "random"


class TestEvolutionaryAgent(AgentContract):
    agent_kind = "evolutionary"

    def test_children_name_their_parents(self):
        history = search("random", {}, 20, 20, seed=3)
        proposals = make_agent("evolutionary", 4).propose(view(history, 2), 6)
        ids = {o.candidate for o in history}
        assert any(p.parents for p in proposals)
        assert all(set(p.parents) <= ids for p in proposals)

    def test_it_beats_random_search_on_the_landscape(self):
        assert median_best("evolutionary") < median_best("random")

    def test_it_starts_from_warm_start_configs(self):
        warm = [{"BX": 128, "BY": 4, "TILE": 4, "UNROLL": 1}]
        proposals = make_agent("evolutionary", 1).propose(view([], 1, warm_start=warm), 3)
        assert proposals[0].params == warm[0]


class TestOptunaAgent(AgentContract):
    agent_kind = "optuna"

    def test_it_beats_random_search_on_the_landscape(self):
        assert median_best("optuna") < median_best("random")

    def test_failures_are_told_with_a_penalty_not_dropped(self):
        history = [Observation(i, p, *landscape(p), landscape(p)[0] == "ok") for i, p in enumerate(SPACE.sample(__import__("numpy").random.default_rng(0), 30))]
        assert any(o.status != "ok" for o in history)
        proposals = make_agent("optuna", 2).propose(view(history, 2), 6)
        assert len(proposals) == 6


class TestForestAgent(AgentContract):
    agent_kind = "forest"

    def test_it_beats_random_search_on_the_landscape(self):
        assert median_best("forest") < median_best("random")

    def test_it_predicts_with_the_model_after_the_startup_evaluations(self):
        history = search("random", {}, 20, 20, seed=3)
        proposals = make_agent("forest", 4).propose(view(history, 2), 4)
        assert len(proposals) == 4
        assert all(p.rationale.startswith("forest predicts") for p in proposals)
        early = make_agent("forest", 4).propose(view(history[:5], 2), 4)  # below startup: random
        assert not any(p.rationale for p in early)

    def test_failed_points_are_fitted_as_worse_than_every_feasible_one(self):
        from swarm.agents.surrogate import ForestAgent

        history = [Observation(i, p, *landscape(p), landscape(p)[0] == "ok")
                   for i, p in enumerate(SPACE.sample(__import__("numpy").random.default_rng(0), 30))]
        agent = ForestAgent(1)
        y = agent._targets(view(history, 2), history)
        ok = [i for i, o in enumerate(history) if o.status == "ok"]
        failed = [i for i, o in enumerate(history) if o.status != "ok"]
        assert failed and min(y[failed]) > max(y[ok])


class TestGaussianProcessAgent(AgentContract):
    agent_kind = "gp"

    def test_it_beats_random_search_on_the_landscape(self):
        assert median_best("gp") < median_best("random")

    def test_it_predicts_with_the_model_after_the_startup_evaluations(self):
        history = search("random", {}, 20, 20, seed=3)
        proposals = make_agent("gp", 4).propose(view(history, 2), 4)
        assert len(proposals) == 4
        assert all(p.rationale.startswith("Gaussian process predicts") for p in proposals)

    def test_features_are_value_ranks_scaled_to_the_unit_interval(self):
        import numpy as np

        base = np.array([[16, 1, 1, 0], [32, 4, 8, 1], [256, 16, 4, 1]], dtype=float)
        X = make_agent("gp", 1)._features(view([], 1), base)
        np.testing.assert_allclose(X, [[0, 0, 0, 0], [0.25, 0.5, 1, 1], [1, 1, 2 / 3, 1]])

    def test_values_outside_a_narrowed_space_stay_in_the_unit_interval(self):
        import numpy as np

        from kernels import DesignSpace

        narrowed = DesignSpace.from_dict({"parameters": [
            {"name": "BX", "values": [32, 64]}, {"name": "BY", "values": [1, 2, 4, 8, 16]},
            {"name": "TILE", "values": [1, 2, 4, 8]}, {"name": "UNROLL", "values": [0, 1]}]})
        from dataclasses import replace

        base = np.array([[16, 1, 1, 0], [32, 1, 1, 0], [48, 1, 1, 0], [64, 1, 1, 0], [256, 1, 1, 0]], dtype=float)
        X = make_agent("gp", 1)._features(replace(view([], 1), space=narrowed), base)
        np.testing.assert_allclose(X[:, 0], [0, 0, 0.5, 1, 1])

    def test_hyperparameters_change_only_at_points_of_the_schedule(self):
        from swarm.agents import gaussian_process as gpmod
        from swarm.agents.surrogate import _values

        assert [gpmod._schedule_point(n, 10, 1.2) for n in (3, 10, 11, 12, 14, 15, 18, 21, 22)] == \
            [3, 10, 10, 12, 12, 15, 18, 18, 22]
        history = search("random", {}, 40, 40, seed=5)
        agent = make_agent("gp", 1, {"tune_points": 12})

        def kernel(n):
            obs = history[:n]
            X = agent._features(view(obs), _values(view(obs), [o.params for o in obs]))
            return agent._hyperparameters(view(obs), obs, X)

        assert kernel(30) is kernel(31)  # both on the first 27 (subsampled to 12): cached
        first = kernel(31).get_params()
        gpmod._kernels.clear()  # another process: the same hyperparameters, fitted again
        again = kernel(31)
        assert repr(again) == repr(kernel(30)) and again.get_params().keys() == first.keys()
        assert repr(kernel(33)) != repr(again)  # the next point of the schedule: 33


def test_surrogates_explain_a_maximised_objective_in_its_own_units():
    from dataclasses import replace

    history = [Observation(o.candidate, o.params, o.status, {"gbps": 100.0 / o.metrics["latency_ms"]}, o.feasible)
               if o.status == "ok" else o for o in search("random", {}, 20, 20, seed=3)]
    observed = [o.metrics["gbps"] for o in history if o.status == "ok"]
    v = replace(view(history, 2), objectives=({"metric": "gbps", "direction": "maximize"},))
    for kind in ("forest", "gp"):
        proposals = make_agent(kind, 4).propose(v, 3)
        predicted = [float(p.rationale.split("predicts gbps ")[1].split()[0]) for p in proposals]
        assert all(0.5 * min(observed) <= g <= 2 * max(observed) for g in predicted), (kind, predicted, observed)


class TestLocalSearchAgent(AgentContract):
    agent_kind = "local"

    def test_it_beats_random_search_on_the_landscape(self):
        assert median_best("local") < median_best("random")

    def test_it_climbs_from_the_best_candidate_first(self):
        history = search("random", {}, 20, 20, seed=3)
        best = min((o for o in history if o.status == "ok"), key=lambda o: o.metrics["latency_ms"])
        for settings, most in (({"model_after": 0}, 1), ({}, 1), ({"radius": 2}, 2)):
            proposals = make_agent("local", 4, settings).propose(view(history, 2), 3)
            assert len(proposals) == 3
            for p in proposals:
                assert p.parents == (best.candidate,)
                assert 1 <= sum(p.params[k] != best.params[k] for k in p.params) <= most

    def test_neighbours_are_tried_in_the_order_the_forest_predicts(self):
        import numpy as np

        history = search("random", {}, 20, 20, seed=3)
        best = min((o for o in history if o.status == "ok"), key=lambda o: o.metrics["latency_ms"])
        agent = make_agent("local", 4, {"radius": 1})
        proposals = agent.propose(view(history, 2), 3)
        assert all("the forest ranks it" in p.rationale for p in proposals)
        # The same forest (same seed draw) ranks every fresh one-parameter neighbour.
        again = make_agent("local", 4, {"radius": 1})
        predict = again._model(view(history, 2))
        fresh = [(p, w) for p, w in again._neighbours(view(history, 2), best.params) if SPACE.contains(p)
                 and SPACE.point_key(p) not in view(history, 2).seen]
        mean, _ = predict([p for p, _ in fresh])
        expected = [fresh[int(i)][0] for i in np.argsort(mean, kind="stable")[:3]]
        assert [p.params for p in proposals] == expected

    def test_in_the_endgame_the_best_points_neighbours_are_ranked_together_by_the_forest(self):
        """In the run's endgame the proposals are the unseen one-parameter neighbours of the five
        best points, in the order the forest predicts, each with its base as parent; outside
        it, or with ``endgame_bases`` 1, the incumbent's neighbours come first."""
        from dataclasses import replace

        import numpy as np

        history = search("random", {}, 24, 24, seed=3)
        v = view(history, 2)
        end = replace(v, endgame=True)
        ranked = [o for o in v.ranked() if v.score(o) != float("inf")]
        proposals = make_agent("local", 4).propose(end, 6)
        again = make_agent("local", 4)
        predict = again._model(end)
        moves, parent = [], {}
        for base in ranked[:5]:
            for p, _ in again._neighbours(end, base.params):
                if SPACE.contains(p) and SPACE.point_key(p) not in v.seen and SPACE.point_key(p) not in parent:
                    parent[SPACE.point_key(p)] = base.candidate
                    moves.append(p)
        mean, _ = predict(moves)
        expected = [moves[int(i)] for i in np.argsort(mean, kind="stable")[:6]]
        assert [p.params for p in proposals] == expected
        assert [p.parents for p in proposals] == [(parent[SPACE.point_key(p.params)],) for p in proposals]
        place = {o.candidate: i for i, o in enumerate(ranked[:5], start=1)}
        assert all(p.rationale.startswith("endgame: ") and
                   p.rationale.endswith(f"a neighbour of the run's best point number {place[p.parents[0]]}")
                   for p in proposals)
        assert len({p.parents for p in proposals}) > 1  # not only the incumbent's neighbours
        best = ranked[0].candidate
        for agent, seen_view in ((make_agent("local", 4), v), (make_agent("local", 4, {"endgame_bases": 1}), end)):
            assert {p.parents for p in agent.propose(seen_view, 3)} == {(best,)}

    def test_in_the_endgame_it_climbs_only_inside_the_space_and_leaves_what_it_cannot_climb_to_others(self):
        """A direction narrowed the space to BX 16 or 32 after the best points were found
        elsewhere: the endgame climbs from the best points inside it. With nothing to climb
        (every evaluation failed) it proposes nothing, not random points: the orchestrator gives
        those slots to the other agents."""
        from dataclasses import replace

        from kernels import DesignSpace

        history = search("random", {}, 24, 24, seed=3)
        spec = {"parameters": [{"name": p.name, "values": list(p.values)} for p in SPACE.parameters],
                "restrictions": ["BX * BY <= 1024"]}
        spec["parameters"][0]["values"] = [16, 32]
        narrowed = DesignSpace.from_dict(spec)
        inside = {o.candidate for o in history if narrowed.contains(o.params)}
        assert inside and min(history, key=lambda o: view(history).score(o)).candidate not in inside
        end = replace(view(history, 2), space=narrowed, endgame=True)
        proposals = make_agent("local", 4).propose(end, 4)
        assert proposals and all(p.rationale.startswith("endgame: ") for p in proposals)
        assert all(narrowed.contains(p.params) and p.parents[0] in inside for p in proposals)
        failed = [Observation(o.candidate, o.params, "runtime_error", {}, False) for o in history]
        assert make_agent("local", 4).propose(replace(view(failed, 2), endgame=True), 4) == []
        assert len(make_agent("local", 4).propose(view(failed, 2), 4)) == 4

    def test_once_the_incumbents_neighbours_are_known_it_climbs_in_another_basin(self):
        """The incumbent's one-parameter neighbours are all evaluated (and worse); the next
        base is the best point at least half the parameters away, not the runner-up next door."""
        best = {"BX": 128, "BY": 4, "TILE": 4, "UNROLL": 1}
        far = {"BX": 16, "BY": 1, "TILE": 1, "UNROLL": 0}  # differs in every parameter
        points = [best] + [{**best, p.name: v} for p in SPACE.parameters for v in p.values if v != best[p.name]]
        points = [p for p in points if SPACE.contains(p)]
        history = [Observation(i, p, "ok", {"latency_ms": 1.0 if i == 0 else 2.0 + 0.01 * i}, True)
                   for i, p in enumerate(points)]
        history.append(Observation(len(history), far, "ok", {"latency_ms": 9.0}, True))
        for settings, parent in (({"spread": 0.0}, history[1].candidate), ({}, history[-1].candidate)):
            proposals = make_agent("local", 4, {"model_after": 0, **settings}).propose(view(history, 2), 2)
            assert [p.parents for p in proposals] == [(parent,)] * 2, settings

    def test_once_the_incumbent_stands_it_also_climbs_in_each_switchs_other_niche(self):
        """UNROLL is a switch (two values). The incumbent (UNROLL=1) has stood for 48
        evaluations with its neighbours known; the best UNROLL=0 point, three parameters away,
        becomes a base before the other basin of the same niche (``far``), and only then."""
        from dataclasses import replace

        best = {"BX": 128, "BY": 4, "TILE": 4, "UNROLL": 1}
        far = {"BX": 32, "BY": 1, "TILE": 4, "UNROLL": 1}  # another basin, same niche
        niche = {"BX": 16, "BY": 16, "TILE": 4, "UNROLL": 0}  # the other niche's best, worse than far

        def away(p, q):
            return sum(p[k] != q[k] for k in p)

        points = [best] + [p for p in SPACE.iter_valid() if away(p, best) == 1] + [far, niche]
        filler = [p for p in SPACE.iter_valid() if p not in points and min(away(p, q) for q in (best, far, niche)) >= 2]
        # The incumbent's own UNROLL=0 neighbour is slow: the niche's best lies elsewhere.
        history = [Observation(i, p, "ok", {"latency_ms": 1.0 if i == 0 else 30.0 if p == {**best, "UNROLL": 0}
                                            else 2.0 + 0.01 * i}, True) for i, p in enumerate(points)]
        history += [Observation(len(history) + i, p, "ok", {"latency_ms": 50.0 + i}, True) for i, p in enumerate(filler)]
        assert len(history) - 1 >= 48
        for settings, parent in (({"niche_after": 0}, history[len(points) - 2]), ({}, history[len(points) - 1])):
            proposals = make_agent("local", 4, {"model_after": 0, **settings}).propose(view(history, 2), 2)
            assert [p.parents for p in proposals] == [(parent.candidate,)] * 2, settings
        assert all(p.rationale.endswith("climbing in the niche UNROLL=0") for p in proposals)
        # From exactly niche_after evaluations on (the incumbent is the first of them), and
        # with one base besides the niches too.
        age = len(history) - 1
        for settings in ({"niche_after": age}, {"bases": 1}, {"spread": 0.0}):
            proposals = make_agent("local", 4, {"model_after": 0, **settings}).propose(view(history, 2), 2)
            assert [p.parents for p in proposals] == [(history[len(points) - 1].candidate,)] * 2, settings
        # Younger than niche_after, the incumbent is climbed from without niches.
        proposals = make_agent("local", 4, {"model_after": 0, "niche_after": age + 1}).propose(view(history, 2), 2)
        assert [p.parents for p in proposals] == [(history[len(points) - 2].candidate,)] * 2
        # Points outside the constraints are no niche of a feasible incumbent.
        outside = [replace(o, feasible=False) if o.params["UNROLL"] == 0 else o for o in history]
        proposals = make_agent("local", 4, {"model_after": 0}).propose(view(outside, 2), 2)
        assert not any("niche" in p.rationale for p in proposals)

    def test_a_constrained_space_is_climbed_through_two_parameter_moves(self):
        from dataclasses import replace

        from kernels import DesignSpace

        # Every single change breaks BX * BY == 512: only paired changes are valid.
        tied = DesignSpace.from_dict({"parameters": [
            {"name": "BX", "values": [16, 32, 64, 128, 256]}, {"name": "BY", "values": [2, 4, 8, 16, 32]},
            {"name": "TILE", "values": [4]}, {"name": "UNROLL", "values": [1]}],
            "restrictions": ["BX * BY == 512"]})
        points = tied.sample(__import__("numpy").random.default_rng(0), 3)
        history = [Observation(i, p, *landscape(p), True) for i, p in enumerate(points)]
        v = replace(view(history, 2), space=tied, seen=frozenset(tied.point_key(p) for p in points))
        best = min(history, key=lambda o: o.metrics["latency_ms"])
        one = make_agent("local", 4, {"model_after": 2}).propose(v, 2)
        assert [p.rationale for p in one] == ["perturbation of a local optimum"] * 2  # no valid single change
        proposals = make_agent("local", 4, {"model_after": 2, "radius": 2}).propose(v, 2)
        assert any(p.rationale.startswith("two parameters changed") and p.parents == (best.candidate,)
                   and {k for k in p.params if p.params[k] != best.params[k]} == {"BX", "BY"} for p in proposals)


def test_unknown_agent_kinds_are_named():
    import pytest

    with pytest.raises(KeyError, match="known: evolutionary, forest, gp, llm, local, optuna, pack, random"):
        make_agent("annealing", 1)


class TestPackAgent(AgentContract):
    agent_kind = "pack"

    def test_it_beats_random_search_on_the_landscape(self):
        assert median_best("pack") < median_best("random")

    def test_children_take_every_value_from_the_leaders_or_a_member_or_one_shake(self):
        history = search("random", {}, 30, 30, seed=3)
        v = view(history, 2)
        ranked = [o for o in v.ranked() if v.score(o) != float("inf")]
        members = ranked[:11]
        proposals = make_agent("pack", 5, {"shake_rate": 0.0}).propose(v, 8)
        assert len(proposals) == 8
        ids = {o.candidate for o in members}
        for p in proposals:
            assert set(p.parents) <= ids and {o.candidate for o in ranked[:3]} <= set(p.parents)
            # a child differs from some recombination of its parents in at most one parameter
            # (the Hamming move when the recombination was already evaluated)
            parents = [o.params for o in members if o.candidate in p.parents]
            off = sum(all(par[k] != v_ for par in parents) for k, v_ in p.params.items())
            assert off <= 1

    def test_it_shakes_more_while_the_best_does_not_improve(self):
        from swarm.agents.pack import _stagnation

        history = search("random", {}, 30, 30, seed=3)
        v = view(history, 2)
        best_at = min(range(len(history)), key=lambda i: v.score(history[i]))
        assert _stagnation(v) == len(history) - 1 - best_at
