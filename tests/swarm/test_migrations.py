"""Data migrations keep what is stored meaningful."""

import importlib

import pytest
from django.apps import apps

from kernels.space import DesignSpace
from swarm.models import Goal
from tests.swarm.synthetic import SPACE, synthetic_goal

restrictions_migration = importlib.import_module("swarm.migrations.0004_restrictions_as_conditions")


@pytest.mark.parametrize("text, rewritten", [
    ("X * Y <= 8", "X * Y <= 8"),  # a condition already: kept
    ("not X or Y > 2", "not X or Y > 2"),
    ("X", "X"),  # a flag
    ("X % 2", "(X % 2) != 0"),  # taken by its truthiness before: the same meaning, said
    ("X and Y - 1", "(X and Y - 1) != 0"),
    ("X >", "X >"),  # not an expression: left for the space to report
])
def test_a_restriction_that_is_not_a_condition_becomes_one_with_the_same_meaning(text, rewritten):
    assert restrictions_migration.as_condition(text) == rewritten


def test_stored_goals_and_runs_load_after_the_migration(db):
    names = [p.name for p in SPACE.parameters]
    legacy = f"{names[0]} % 2"
    goal = synthetic_goal()
    Goal.objects.filter(pk=goal.pk).update(space={**SPACE.to_dict(), "restrictions": [legacy]})  # as stored before
    restrictions_migration.forwards(apps, None)
    goal.refresh_from_db()
    assert goal.space["restrictions"] == [f"({legacy}) != 0"]
    space = goal.design_space()
    point = {p.name: p.values[0] for p in space.parameters}
    assert space.satisfies_restrictions(point) == bool(point[names[0]] % 2)
    assert isinstance(space, DesignSpace)


stored_metrics_migration = importlib.import_module("swarm.migrations.0009_evidence_stored_metrics")


def test_existing_evidence_gets_its_stored_metric_columns(db):
    from swarm.models import Candidate, Evidence

    goal = synthetic_goal()
    run = goal.runs.create(budget=2, seed=0, space=goal.space)
    rows = []
    for i, metrics in enumerate([{"latency_ms": 0.5, "max_rel_error": 1e-6, "gbps": 12}, {"latency_ms": "n/a"}]):
        c = Candidate.objects.create(goal=goal, run=run, generation=1, agent="random", content_hash=f"h{i}",
                                     params={}, source="", status="ok")
        rows.append(Evidence.objects.create(candidate=c, status="ok", metrics=metrics))
    Evidence.objects.update(latency_ms=None, max_rel_error=None, gbps=None)  # as stored before the columns
    stored_metrics_migration.fill(apps, None)
    assert list(Evidence.objects.order_by("id").values_list("latency_ms", "max_rel_error", "gbps")) == [
        (0.5, 1e-6, 12.0), (None, None, None)]
