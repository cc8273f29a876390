from django.apps import AppConfig


class LabelingConfig(AppConfig):
    name = "labeling"
    verbose_name = "Labeling"

    def ready(self) -> None:
        from django.conf import settings
        from PIL import Image

        from . import permissions  # noqa: F401  (registers the permission rules)

        # Pillow refuses images past twice this many pixels before decoding them (bomb guard).
        Image.MAX_IMAGE_PIXELS = settings.MAX_IMAGE_PIXELS
