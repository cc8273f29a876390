"""Create an agent (simulator, robot host or RL worker) and print its API token once."""

from django.core.management.base import BaseCommand, CommandError

from labeling.models import Agent
from labeling.services import agent_create, agent_rotate_token


class Command(BaseCommand):
    help = "Create an agent and print its API token (shown once). --rotate issues a new token for an existing agent."

    def add_arguments(self, parser):
        parser.add_argument("name", help="A unique agent name, e.g. franka-lab-1 or rl-worker-3.")
        parser.add_argument("--kind", choices=[k for k, _ in Agent.Kind.choices], default=Agent.Kind.SIM)
        parser.add_argument("--rotate", action="store_true", help="Replace the token of an existing agent.")

    def handle(self, *args, name, kind, rotate, **options):
        existing = Agent.objects.filter(name=name).first()
        if rotate:
            if existing is None:
                raise CommandError(f"no agent named {name!r}")
            token = agent_rotate_token(agent=existing)
        elif existing is not None:
            raise CommandError(f"an agent named {name!r} exists; use --rotate to issue it a new token")
        else:
            _, token = agent_create(name=name, kind=kind)
        self.stdout.write(token)
        self.stderr.write(self.style.WARNING("Store this token now: it is not shown again."))
