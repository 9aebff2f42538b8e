from django.urls import path

from swarm.engine_registry import views

urlpatterns = [
    path("", views.engine_list, name="engine-list"),
    path("register/", views.engine_register, name="engine-register"),
    path("<int:pk>/", views.engine_detail, name="engine-detail"),
    path("<int:pk>/benchmark/", views.engine_benchmark, name="engine-benchmark"),
    path("<int:pk>/compare/", views.engine_compare, name="engine-compare"),
    path("guard/<int:pk>/override/", views.guard_override, name="engine-guard-override"),
]
