"""API docs pages served entirely by the app (Swagger UI and Redoc from drf-spectacular-sidecar).

Redoc's page template asks Google for fonts and its bundle shows a logo from Redocly's CDN; our template
drops the fonts and a Content-Security-Policy keeps images and fonts on this host, so an air-gapped
browser makes no outside request and waits on none.
"""

from __future__ import annotations

from drf_spectacular.views import SpectacularRedocView, SpectacularSwaggerView

LOCAL_ONLY_CSP = "img-src 'self' data: blob:; font-src 'self' data:"


def _local_only(response):
    response["Content-Security-Policy"] = LOCAL_ONLY_CSP
    return response


class SwaggerDocsView(SpectacularSwaggerView):
    def get(self, request, *args, **kwargs):
        return _local_only(super().get(request, *args, **kwargs))


class RedocDocsView(SpectacularRedocView):
    template_name = "api_docs/redoc.html"

    def get(self, request, *args, **kwargs):
        return _local_only(super().get(request, *args, **kwargs))
