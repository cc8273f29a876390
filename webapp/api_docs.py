"""API docs pages served entirely by the app (Swagger UI and Redoc from drf-spectacular-sidecar).

Redoc's page template asks Google for fonts and its bundle shows a logo from Redocly's CDN; our template
drops the fonts and a Content-Security-Policy keeps images and fonts on this host, so an air-gapped
browser makes no outside request and waits on none.

OPTIONS gets a plain answer naming the allowed methods: DRF's own OPTIONS answer is rendered by the view's
HTML renderer, which has no template for it (a 500). Logged out, the pages send the browser to the login page
with `next=` back to them (was DRF's bare 401 text); the schema itself (/api/schema/) still answers 401.
"""

from __future__ import annotations

from django.contrib.auth.views import redirect_to_login
from django.http import HttpResponse
from drf_spectacular.views import SpectacularRedocView, SpectacularSwaggerView
from rest_framework.exceptions import AuthenticationFailed, NotAuthenticated
from rest_framework.views import APIView

LOCAL_ONLY_CSP = "img-src 'self' data: blob:; font-src 'self' data:"


def _local_only(response):
    response["Content-Security-Policy"] = LOCAL_ONLY_CSP
    return response


class _PlainOptions(APIView):
    def options(self, request, *args, **kwargs):
        response = HttpResponse(status=204)
        response["Allow"] = "GET, HEAD, OPTIONS"
        return response

    def handle_exception(self, exc):
        if isinstance(exc, NotAuthenticated | AuthenticationFailed):
            return redirect_to_login(self.request.get_full_path())
        return super().handle_exception(exc)


class SwaggerDocsView(_PlainOptions, SpectacularSwaggerView):
    def get(self, request, *args, **kwargs):
        return _local_only(super().get(request, *args, **kwargs))


class RedocDocsView(_PlainOptions, SpectacularRedocView):
    template_name = "api_docs/redoc.html"

    def get(self, request, *args, **kwargs):
        return _local_only(super().get(request, *args, **kwargs))
