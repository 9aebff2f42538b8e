from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.urls import include, path

urlpatterns = [
    path("admin/", admin.site.urls),
    path("login/", auth_views.LoginView.as_view(), name="login"),
    path("logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("engines/", include("swarm.engine_registry.urls")),
    path("", include("swarm.web.urls")),
]

handler400 = "int21_site.errors.bad_request"
