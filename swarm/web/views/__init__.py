"""Server-rendered pages of the engineer's workbench (the JSON API lives in :mod:`swarm.web.api`).

One module per page family: goals, runs, candidates (and compare), production.
"""

from swarm.web.views.candidates import candidate_detail, candidate_promote, compare, compare_measure_paired
from swarm.web.views.goals import (
    goal_archive,
    goal_create,
    goal_detail,
    goal_duplicate,
    goal_edit,
    goal_list,
    run_start,
)
from swarm.web.views.production import (
    production,
    production_rollback,
    promotion_request_approve,
    promotion_request_reject,
)
from swarm.web.views.runs import run_candidate_cancel, run_detail, run_direction, run_insight_accept, run_stop

__all__ = [
    "candidate_detail",
    "candidate_promote",
    "compare",
    "compare_measure_paired",
    "goal_archive",
    "goal_create",
    "goal_detail",
    "goal_duplicate",
    "goal_edit",
    "goal_list",
    "production",
    "production_rollback",
    "promotion_request_approve",
    "promotion_request_reject",
    "run_candidate_cancel",
    "run_detail",
    "run_direction",
    "run_insight_accept",
    "run_start",
    "run_stop",
]
