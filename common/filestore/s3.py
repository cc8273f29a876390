"""django-storages' S3 backend whose file URLs are the app's own (`MEDIA_URL` + name).

Browsers never talk to the bucket: the labeling page's frames, snapshot and model downloads all go through
the permission-checked media view (webapp.views.media), which reads the object. Same-origin URLs that never
change stay cacheable (the view answers `immutable`) and do not expire under a page left open; the bucket
needs no public endpoint. `signed_url` still gives a short-lived signed URL where one is wanted."""

from __future__ import annotations

from urllib.parse import quote

from django.conf import settings
from storages.backends.s3 import S3Storage


class AppServedS3Storage(S3Storage):
    def url(self, name, parameters=None, expire=None, http_method=None) -> str:  # type: ignore[no-untyped-def]
        return f"{settings.MEDIA_URL}{quote(name)}"

    def signed_url(self, name: str, expire: int | None = None) -> str:
        return str(super().url(name, expire=expire))
