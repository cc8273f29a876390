"""Create the admin login, the demo project (real PickCube episodes, rendered once and cached) and a demo
agent token."""

from __future__ import annotations

import secrets

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand

from webapp.addresses import app_url
from webapp.demo.pickcube import seed_demo_project
from webapp.demo.services import demo_agent_token


class Command(BaseCommand):
    help = "Idempotently create an admin user, the demo project with labeled episodes, and a demo agent."

    def add_arguments(self, parser):
        parser.add_argument(
            "--episodes",
            type=int,
            default=24,
            help="PickCube episodes to seed (default 24: fewer train a reward that does not generalize)",
        )
        parser.add_argument(
            "--size", type=int, default=128, help="camera size in pixels (default 128, as manage.py demo's)"
        )
        parser.add_argument(
            "--placeholder", action="store_true", help="seed generated scenes instead of running the simulator"
        )

    def handle(self, *args, episodes, size, placeholder, **options):
        data = settings.DATA_DIR
        data.mkdir(parents=True, exist_ok=True)
        password_file = data / "admin_password.txt"
        User = get_user_model()
        if not User.objects.filter(username="admin").exists():
            password = secrets.token_urlsafe(9)
            User.objects.create_superuser("admin", "admin@localhost", password)
            password_file.write_text(password)
            password_file.chmod(0o600)
        password = password_file.read_text().strip() if password_file.exists() else "(set earlier; see the admin)"

        project = seed_demo_project(episodes=episodes, size=size, stdout=self.stdout, placeholder=placeholder)
        # the demo's one token serves the robot agent and RL workers alike: their scopes, on the demo project
        token_file = demo_agent_token(project=project, token_file=data / "demo_agent_token.txt")
        self.stdout.write(
            self.style.SUCCESS(
                f"\n  Reward Studio: {app_url()}\n  Log in as: admin / {password}\n"
                f"  Demo agent token (for robot_agent / RL workers): {token_file}\n"
            )
        )
