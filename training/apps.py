"""The training app; adds "Label next" and the labeling queue to the project page."""

from django.apps import AppConfig


class TrainingConfig(AppConfig):
    name = "training"
    verbose_name = "Training"

    def ready(self) -> None:
        from labeling import pages

        from . import permissions  # noqa: F401  (registers the permission rules)

        for link in (("Label next", "label-next"), ("Labeling queue", "label-queue")):
            if link not in pages.PROJECT_LINKS:
                pages.PROJECT_LINKS.append(link)
