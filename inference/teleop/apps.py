"""Live teleop as its own Django app: robot agents stream steps, operators watch and label them."""

from django.apps import AppConfig


class TeleopConfig(AppConfig):
    name = "inference.teleop"
    label = "teleop"
    verbose_name = "Teleop"
    default_auto_field = "django.db.models.BigAutoField"
