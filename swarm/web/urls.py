from django.urls import include, path

from swarm.web import views
from swarm.web.views.candidate_table import run_candidates

urlpatterns = [
    path("", views.goal_list, name="goal-list"),
    path("goals/new/", views.goal_create, name="goal-create"),
    path("goals/<int:pk>/", views.goal_detail, name="goal-detail"),
    path("goals/<int:pk>/edit/", views.goal_edit, name="goal-edit"),
    path("goals/<int:pk>/archive/", views.goal_archive, name="goal-archive"),
    path("goals/<int:pk>/duplicate/", views.goal_duplicate, name="goal-duplicate"),
    path("goals/<int:pk>/runs/", views.run_start, name="run-start"),
    path("runs/<int:pk>/", views.run_detail, name="run-detail"),
    path("runs/<int:pk>/candidates/", run_candidates, name="run-candidates"),
    path("runs/<int:pk>/stop/", views.run_stop, name="run-stop"),
    path("runs/<int:pk>/candidates/<int:candidate_id>/cancel/", views.run_candidate_cancel, name="run-candidate-cancel"),
    path("runs/<int:pk>/directions/", views.run_direction, name="run-direction"),
    path("runs/<int:pk>/insights/<int:insight_id>/accept/", views.run_insight_accept, name="run-insight-accept"),
    path("candidates/<int:pk>/", views.candidate_detail, name="candidate-detail"),
    path("candidates/<int:pk>/promote/", views.candidate_promote, name="candidate-promote"),
    path("compare/", views.compare, name="compare"),
    path("compare/paired/", views.compare_measure_paired, name="compare-paired"),
    path("production/", views.production, name="production"),
    path("production/<str:workload>/<str:target>/<str:shape_set>/rollback/", views.production_rollback,
         name="production-rollback"),
    path("promotion-requests/<int:pk>/approve/", views.promotion_request_approve, name="promotion-request-approve"),
    path("promotion-requests/<int:pk>/reject/", views.promotion_request_reject, name="promotion-request-reject"),
    path("api/", include("swarm.web.api.urls")),
]
