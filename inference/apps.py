from django.apps import AppConfig


class InferenceConfig(AppConfig):
    name = "inference"
    verbose_name = "Inference"

    def ready(self) -> None:
        from . import redeploy  # noqa: F401 - connects the receivers of training's redeploy signals
