"""Server-rendered pages of the engineer's workbench (the JSON API lives in :mod:`swarm.api`).

One module per page family: goals, runs, candidates (and compare), production.
"""

from swarm.views.candidates import candidate_detail, candidate_promote, candidate_static, compare, compare_measure_paired
from swarm.views.goals import (
    goal_archive,
    goal_check_space,
    goal_create,
    goal_defaults,
    goal_detail,
    goal_duplicate,
    goal_edit,
    goal_list,
    run_start,
)
from swarm.views.production import (
    production,
    production_rollback,
    promotion_request_approve,
    promotion_request_reject,
    promotion_request_status,
)
from swarm.views.runs import run_candidate_cancel, run_detail, run_direction, run_insight_accept, run_stop

__all__ = [
    "candidate_detail",
    "candidate_promote",
    "candidate_static",
    "compare",
    "compare_measure_paired",
    "goal_archive",
    "goal_check_space",
    "goal_create",
    "goal_defaults",
    "goal_detail",
    "goal_duplicate",
    "goal_edit",
    "goal_list",
    "production",
    "production_rollback",
    "promotion_request_approve",
    "promotion_request_reject",
    "promotion_request_status",
    "run_candidate_cancel",
    "run_detail",
    "run_direction",
    "run_insight_accept",
    "run_start",
    "run_stop",
]
