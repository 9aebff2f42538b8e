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
