from django.apps import AppConfig


class InferenceConfig(AppConfig):
    name = "inference"
    verbose_name = "Inference"

    def ready(self) -> None:
        from . import (
            permissions,  # noqa: F401 - registers the permission rules
            redeploy,  # noqa: F401 - connects the receivers of training's redeploy signals
        )
        from .monitor.services import alarm_signal
        from .monitor.webhooks import on_alarm_raised

        alarm_signal.connect(on_alarm_raised, dispatch_uid="inference.alarm_webhook")
