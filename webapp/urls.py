from django.conf import settings
from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.urls import include, path
from drf_spectacular.views import SpectacularAPIView

from . import views
from .api_docs import RedocDocsView, SwaggerDocsView

urlpatterns = [
    path("", views.home, name="home"),
    path("healthz", views.healthz, name="healthz"),
    path("metrics", views.metrics, name="metrics"),
    path("admin/", admin.site.urls),
    path("accounts/login/", auth_views.LoginView.as_view(), name="login"),
    path("accounts/logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("api/schema/", SpectacularAPIView.as_view(), name="schema"),
    path("api/docs/", SwaggerDocsView.as_view(url_name="schema"), name="api-docs"),
    path("api/redoc/", RedocDocsView.as_view(url_name="schema"), name="api-redoc"),
    path("", include("labeling.urls")),
    path("", include("training.urls")),
    path("", include("inference.urls")),
    path(f"{settings.MEDIA_URL.strip('/')}/<path:path>", views.media, name="media"),
]
