"""Create the admin login, a demo project with labeled generated episodes, and a demo agent token."""

from __future__ import annotations

import secrets

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand

from labeling.access import ALL_SCOPES
from labeling.demo_data import seed_generated_episodes
from labeling.models import Agent, Project
from labeling.services import agent_create

DEMO_PROJECT = "PickCube demo"


class Command(BaseCommand):
    help = "Idempotently create an admin user, the demo project with labeled episodes, and a demo agent."

    def add_arguments(self, parser):
        parser.add_argument("--episodes", type=int, default=12, help="Generated episodes to seed (default 12).")

    def handle(self, *args, episodes, **options):
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

        project, _ = Project.objects.get_or_create(
            name=DEMO_PROJECT,
            defaults={"task_description": "Pick up the red cube and lift it.", "camera_views": ["main", "extra"]},
        )
        seeded = seed_generated_episodes(project=project, episodes=episodes)
        if seeded:
            self.stdout.write(f"Seeded {seeded} labeled demo episodes in '{project.name}'.")

        token_file = data / "demo_agent_token.txt"
        if not Agent.objects.filter(name="demo-agent").exists() or not token_file.exists():
            Agent.objects.filter(name="demo-agent").delete()
            _, token = agent_create(
                name="demo-agent", kind=Agent.Kind.SIM, scopes=ALL_SCOPES, all_projects=True
            )  # the demo's one token serves the robot agent and RL workers alike
            token_file.write_text(token)
            token_file.chmod(0o600)
        port = settings_port()
        self.stdout.write(
            self.style.SUCCESS(
                f"\n  Reward Studio: http://127.0.0.1:{port}/\n  Log in as: admin / {password}\n"
                f"  Demo agent token (for robot_agent / RL workers): {token_file}\n"
            )
        )


def settings_port() -> str:
    import os

    return os.environ.get("RS_PORT", "8000")
