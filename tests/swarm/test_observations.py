"""The incremental view of a goal's history equals the one built from scratch, whatever changes."""

from datetime import UTC, datetime

from kernels.space import point_key
from swarm.agents import Observation
from swarm.models import constraints_met
from swarm.runs import agent_view
from swarm.runs.history import Row

NAMES = ("A", "B")


def row(i, status="ok", latency=None, params=None, gen=1):
    metrics = None if status in ("queued", "running") else {"latency_ms": latency if latency is not None else float(i)}
    return Row(i, 1, gen, "random", status, params or {"A": i, "B": 2 * i}, metrics,
               None if metrics is None else datetime(2026, 1, 1, tzinfo=UTC))


def from_scratch(constraints, names, rows):
    """The view exactly as the orchestrator built it before it was incremental."""
    seen, history = set(), []
    for r in rows:
        seen.add(point_key(r.params) if r.params.keys() == set(names) else f"#{r.id}")
        if r.status not in ("queued", "running"):
            m = r.metrics or {}
            history.append(Observation(r.id, r.params, r.status, m, r.status == "ok" and constraints_met(constraints, m), r.agent))
    return frozenset(seen), tuple(history)


def check(identity, constraints, rows, names=NAMES):
    got = agent_view.observe(identity, constraints, names, rows, point_key, lambda m: constraints_met(constraints, m))
    assert got == from_scratch(constraints, names, rows)
    return got


def test_the_incremental_view_equals_the_one_built_from_scratch_as_the_history_changes():
    agent_view.forget()
    ident = "7@1.0"
    rows = [row(1), row(2, "wrong_result"), row(3, "queued"), row(4)]
    check(ident, [], rows)
    # The pending row finishes; new rows arrive, one of another space (seen by id only).
    rows = [row(1), row(2, "wrong_result"), row(3, latency=0.5), row(4), row(5, "running"), row(6, params={"C": 1})]
    seen, history = check(ident, [], rows)
    assert "#6" in seen and [o.candidate for o in history] == [1, 2, 3, 4, 6]
    rows[4] = row(5)
    check(ident, [], rows)
    # A constraint set mid-run changes feasibility of rows already folded in.
    tight = [{"metric": "latency_ms", "op": "<=", "value": 2.0}]
    _, history = check(ident, tight, rows)
    assert [o.feasible for o in history if o.status == "ok"] == [True, True, False, False, False]
    # Rows deleted before the kept prefix (e.g. a stopped run's queued candidates): rebuilt.
    check(ident, tight, [rows[0], *rows[2:]])
    # Another space's names: every key is recomputed.
    check(ident, tight, rows, names=("C",))


def test_runs_are_kept_apart_and_the_cache_is_bounded():
    agent_view.forget()
    for i in range(agent_view.MAX_RUNS + 3):
        check(f"{i}@0", [], [row(1), row(2)])
    assert len(agent_view._kept) == agent_view.MAX_RUNS
    check("0@0", [], [row(9)])  # evicted earlier: built again from these rows
