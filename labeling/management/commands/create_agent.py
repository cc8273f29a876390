"""Create an agent (simulator, robot host or RL worker) and print its API token once."""

from django.core.management.base import BaseCommand, CommandError

from projects.access import ALL_SCOPES, DEFAULT_SCOPES
from projects.models import Agent, Project
from projects.selectors import deployments_by_name
from projects.services import agent_create, agent_rotate_token


class Command(BaseCommand):
    help = (
        "Create an agent and print its API token (shown once). Without flags a token gets the scopes its kind "
        "needs and no project; --scope, --project and --deployment grant more. --rotate issues a new token "
        "for an existing agent."
    )

    def add_arguments(self, parser):
        parser.add_argument("name", help="A unique agent name, e.g. franka-lab-1 or rl-worker-3.")
        parser.add_argument("--kind", choices=[k for k, _ in Agent.Kind.choices], default=Agent.Kind.SIM)
        parser.add_argument(
            "--scope",
            action="append",
            choices=[*ALL_SCOPES, "all"],
            help="A scope the token gets (repeat for several; 'all' for every one). Default by kind: "
            + "; ".join(f"{kind}: {', '.join(scopes)}" for kind, scopes in DEFAULT_SCOPES.items()),
        )
        parser.add_argument(
            "--project",
            action="append",
            default=[],
            help="A project (name or id) it may touch; repeat for several; 'all' for every project and deployment.",
        )
        parser.add_argument(
            "--deployment", action="append", default=[], help="A deployment (name) it may ask for rewards; repeatable."
        )
        parser.add_argument("--rotate", action="store_true", help="Replace the token of an existing agent.")

    def handle(self, *args, name, kind, scope, project, deployment, rotate, **options):
        existing = Agent.objects.filter(name=name).first()
        if rotate:
            if existing is None:
                raise CommandError(f"no agent named {name!r}")
            token = agent_rotate_token(agent=existing)
        elif existing is not None:
            raise CommandError(f"an agent named {name!r} exists; use --rotate to issue it a new token")
        else:
            scopes = None if scope is None else (ALL_SCOPES if "all" in scope else scope)
            all_projects = "all" in project
            projects = [self._project(ref) for ref in project if ref != "all"]
            deployments, unknown = deployments_by_name(deployment)
            if unknown:
                raise CommandError(f"no deployment named {unknown[0]!r}")
            agent, token = agent_create(
                name=name,
                kind=kind,
                scopes=scopes,
                projects=projects,
                deployments=deployments,
                all_projects=all_projects,
            )
            where = "every project" if all_projects else ", ".join(p.name for p in projects) or "no project"
            if deployments:
                where += "; deployments " + ", ".join(str(d) for d in deployments)
            self.stderr.write(f"{agent.name}: scopes {', '.join(agent.scopes) or 'none'} on {where}.")
        self.stdout.write(token)
        self.stderr.write(self.style.WARNING("Store this token now: it is not shown again."))

    @staticmethod
    def _project(ref: str) -> Project:
        project = Project.objects.filter(pk=int(ref)).first() if ref.isdigit() else None
        project = project or Project.objects.filter(name=ref).first()
        if project is None:
            raise CommandError(f"no project with id or name {ref!r}")
        return project
