"""``/api/``: REST endpoints, the OpenAPI schema (``/api/schema/``) and its docs page."""

from django.urls import path
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerView
from rest_framework.authtoken.views import obtain_auth_token
from rest_framework.routers import DefaultRouter

from swarm.web.api import views
from swarm.web.api.candidate_table import RunCandidateTable

router = DefaultRouter()
router.register("goals", views.GoalViewSet, basename="api-goal")
router.register("runs", views.RunViewSet, basename="api-run")
router.register("candidates", views.CandidateViewSet, basename="api-candidate")
router.register("insights", views.InsightViewSet, basename="api-insight")
router.register("directions", views.DirectionViewSet, basename="api-direction")
router.register("promotions", views.PromotionViewSet, basename="api-promotion")
router.register("promotion-requests", views.PromotionRequestViewSet, basename="api-promotion-request")

urlpatterns = [
    path("production/", views.ProductionList.as_view(), name="api-production"),
    path("production/<str:workload>/<str:target>/<str:shape_set>/", views.ProductionKernel.as_view(),
         name="api-production-kernel"),
    path("production/<str:workload>/<str:target>/<str:shape_set>/rollback/", views.ProductionRollback.as_view(),
         name="api-production-rollback"),
    # file downloads: no trailing slash
    path("runs/<int:pk>/export/candidates.csv", views.RunViewSet.as_view({"get": "export_csv"}), name="api-run-export-csv"),
    path("runs/<int:pk>/export/candidates.json", views.RunViewSet.as_view({"get": "export_json"}),
         name="api-run-export-json"),
    path("runs/<int:pk>/export/kernel_tuner_cache.json", views.RunViewSet.as_view({"get": "export_kernel_tuner"}),
         name="api-run-export-kernel-tuner"),
    path("runs/<int:pk>/table/", RunCandidateTable.as_view(), name="api-run-table"),
    path("token/", obtain_auth_token, name="api-token"),
    path("schema/", SpectacularAPIView.as_view(), name="api-schema"),
    path("docs/", SpectacularSwaggerView.as_view(url_name="api-schema"), name="api-docs"),
    *router.urls,
]
