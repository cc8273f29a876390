from __future__ import annotations

from django.apps import AppConfig


class WebappConfig(AppConfig):
    name = "webapp"
    verbose_name = "Reward Studio"

    def ready(self) -> None:
        from common.filestore import checks  # noqa: F401 - registers the start-up checks

        from . import celery  # noqa: F401 - the Celery app, so that shared tasks queued by this process use it
