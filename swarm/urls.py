from django.urls import path

from swarm import views

urlpatterns = [
    path("", views.goal_list, name="goal-list"),
    path("goals/new/", views.goal_create, name="goal-create"),
    path("goals/<int:pk>/", views.goal_detail, name="goal-detail"),
    path("goals/<int:pk>/runs/", views.run_start, name="run-start"),
    path("runs/<int:pk>/", views.run_detail, name="run-detail"),
    path("runs/<int:pk>/stop/", views.run_stop, name="run-stop"),
    path("candidates/<int:pk>/", views.candidate_detail, name="candidate-detail"),
    path("candidates/<int:pk>/promote/", views.candidate_promote, name="candidate-promote"),
    path("production/", views.production, name="production"),
    path("api/production/", views.api_production, name="api-production"),
    path(
        "api/production/<str:workload>/<str:target>/<str:shape_set>/",
        views.api_production_kernel,
        name="api-production-kernel",
    ),
]
