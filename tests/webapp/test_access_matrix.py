"""Access matrix: every route and WebSocket, asked by every kind of caller, answers as designed.

Callers: anonymous, a non-member (manager of another project), annotator, reviewer and manager of project
P, a site admin, and one agent token per scope on P (plus a second ingest agent that does not own the
episode and an all-scope token on another project). A route allows some of them; everyone else is refused
with the code its kind gets: anonymous 401 (REST) or a login redirect (pages), people outside P 404, people
in P with too small a role 403, tokens lacking the scope 403, tokens not naming P 404, tokens on pages a
login redirect. Allowed callers get anything but a refusal or a 5xx (bodies are mostly invalid on purpose,
so nothing runs; each request is rolled back).

The list of routes is read from the URL conf: a route without an entry here fails the test, so new routes
get an access decision. The data is built once per module inside a transaction that is rolled back at the
end.
"""

from __future__ import annotations

import io
import json
import uuid
from dataclasses import dataclass, field

import numpy as np
import pytest
from asgiref.sync import async_to_sync
from channels.routing import URLRouter
from channels.testing import WebsocketCommunicator
from django.contrib.auth.models import AnonymousUser
from django.core.files.base import ContentFile
from django.core.files.storage import default_storage
from django.db import transaction
from django.test import Client
from django.urls import URLPattern, URLResolver, get_resolver
from PIL import Image
from rest_framework.test import APIClient

PEOPLE = ["outsider", "annotator", "reviewer", "manager", "admin"]
AGENTS = ["ingest", "ingest2", "rewards", "teleop", "labels", "training", "elsewhere"]
CALLERS = ["anon", *PEOPLE, *AGENTS]
MEMBERS = {"annotator", "reviewer", "manager"}
REVIEWERS = {"reviewer", "manager"}

# Routes every caller may use or that are not about project data.
# /metrics (METRICS_TOKEN guards it) and the health checks tell counts and states, never project data.
EXEMPT = {
    "admin/",
    "accounts/login/",
    "accounts/logout/",
    "api/schema/",
    "api/docs/",
    "api/redoc/",
    "healthz",
    "health",
    "metrics",
}


@dataclass
class Case:
    method: str
    url: str  # formatted with the world's ids
    allow: set[str]
    page: bool = False  # a server-rendered page (session login): anonymous and tokens are redirected
    body: dict | None = None
    refuse: dict[str, int] = field(default_factory=dict)  # caller -> code where it differs from the default


def _people(*roles):
    return set(roles) | {"admin"}


VIEWERS = _people(*MEMBERS)
MANAGERS = _people("manager")

MATRIX: dict[str, list[Case]] = {
    "": [Case("GET", "/", set(PEOPLE), page=True)],
    "projects/new/": [Case("GET", "/projects/new/", set(PEOPLE), page=True)],
    "media/<path:path>": [Case("GET", "/media/{frame_path}", VIEWERS, page=True)],
    # -- labeling ------------------------------------------------------------------------------------
    "api/episodes": [
        Case(
            "POST",
            "/api/episodes",
            MANAGERS | {"ingest", "ingest2"},
            body={"project": "{project}", "uuid": "{new_uuid}"},
            refuse={"outsider": 400, "elsewhere": 400},  # a project it cannot see does not exist for it
        )
    ],
    "api/episodes/<uuid:uuid>": [Case("GET", "/api/episodes/{episode}", VIEWERS | {"ingest", "ingest2"})],
    "api/episodes/<uuid:uuid>/steps": [
        Case("POST", "/api/episodes/{episode}/steps", MANAGERS | {"ingest"}, body={}),
        Case("GET", "/api/episodes/{episode}/steps", MANAGERS | {"ingest"}),
    ],
    "api/episodes/<uuid:uuid>/finish": [
        Case("POST", "/api/episodes/{episode}/finish", MANAGERS | {"ingest"}, body={"success": "maybe"})
    ],
    "projects/<int:pk>/": [Case("GET", "/projects/{project}/", VIEWERS, page=True)],
    "projects/<int:pk>/labeling-settings/": [
        Case("POST", "/projects/{project}/labeling-settings/", MANAGERS, page=True, body={"window_size": "0"})
    ],
    "projects/<int:pk>/members/": [Case("POST", "/projects/{project}/members/", MANAGERS, page=True, body={})],
    "episodes/<uuid:uuid>/label/": [Case("GET", "/episodes/{episode}/label/", VIEWERS, page=True)],
    "api/episodes/<uuid:uuid>/labeling": [Case("GET", "/api/episodes/{episode}/labeling", VIEWERS | {"labels"})],
    "api/episodes/<uuid:uuid>/frames": [
        Case("GET", "/api/episodes/{episode}/frames?camera=main&start=0&end=0", VIEWERS | {"labels"})
    ],
    "api/episodes/<uuid:uuid>/frame-labels": [
        Case("PUT", "/api/episodes/{episode}/frame-labels", VIEWERS | {"labels"}, body={})
    ],
    "api/episodes/<uuid:uuid>/window-labels": [
        Case("POST", "/api/episodes/{episode}/window-labels", VIEWERS | {"labels"}, body={}),
        Case("DELETE", "/api/episodes/{episode}/window-labels", VIEWERS | {"labels"}),
    ],
    "api/episodes/<uuid:uuid>/history": [Case("GET", "/api/episodes/{episode}/history", VIEWERS | {"labels"})],
    "api/projects/<int:pk>/episodes": [Case("GET", "/api/projects/{project}/episodes", VIEWERS | {"labels"})],
    "api/projects/<int:pk>/progress": [Case("GET", "/api/projects/{project}/progress", VIEWERS | {"labels"})],
    **{
        f"api/projects/<int:pk>/proposals/{action}": [
            Case(
                "POST",
                f"/api/projects/{{project}}/proposals/{action}",
                _people(*REVIEWERS) | {"labels"},
                body={"episode": "not-a-uuid", "kind": "nonsense"},
            )
        ]
        for action in ("generate", "accept", "reject", "reopen")
    },
    "projects/<int:pk>/proposals/<int:job>/": [
        Case("GET", "/projects/{project}/proposals/{proposal_job}/", VIEWERS, page=True)
    ],
    "api/proposal-jobs/<int:job_id>": [Case("GET", "/api/proposal-jobs/{proposal_job}", VIEWERS | {"labels"})],
    "api/proposal-jobs/<int:job_id>/cancel": [
        Case("POST", "/api/proposal-jobs/{proposal_job}/cancel", _people(*REVIEWERS) | {"labels"})
    ],
    "projects/<int:pk>/label-next": [Case("GET", "/projects/{project}/label-next", VIEWERS, page=True)],
    "projects/<int:pk>/label-queue": [
        Case("GET", "/projects/{project}/label-queue", VIEWERS, page=True),
        Case("POST", "/projects/{project}/label-queue", MANAGERS, page=True, body={"retrain_after_labels": "x"}),
    ],
    "projects/<int:pk>/label-queue/refresh": [
        Case("POST", "/projects/{project}/label-queue/refresh", VIEWERS, page=True)
    ],
    "projects/<int:pk>/import/": [Case("GET", "/projects/{project}/import/", MANAGERS, page=True)],
    "projects/<int:pk>/import/<int:job>/": [
        Case("GET", "/projects/{project}/import/{import_job}/", MANAGERS, page=True)
    ],
    "projects/<int:pk>/export/lerobot/": [
        Case("GET", "/projects/{project}/export/lerobot/", VIEWERS, page=True),
        Case("POST", "/projects/{project}/export/lerobot/", VIEWERS, page=True),
    ],
    "projects/<int:pk>/export/lerobot/<str:token>/": [
        Case("GET", "/projects/{project}/export/lerobot/{export_token}/", VIEWERS, page=True)
    ],
    "projects/<int:pk>/export/lerobot/<str:token>/download": [
        Case("GET", "/projects/{project}/export/lerobot/{export_token}/download", VIEWERS, page=True)
    ],
    # -- training ------------------------------------------------------------------------------------
    "projects/<int:pk>/training/": [Case("GET", "/projects/{project}/training/", VIEWERS, page=True)],
    "projects/<int:pk>/training/snapshots/new": [
        Case("POST", "/projects/{project}/training/snapshots/new", MANAGERS, page=True, body={"val_split": "7"})
    ],
    "projects/<int:pk>/training/jobs/new": [
        Case("POST", "/projects/{project}/training/jobs/new", MANAGERS, page=True, body={})
    ],
    "projects/<int:pk>/compare": [Case("GET", "/projects/{project}/compare", VIEWERS, page=True)],
    "projects/<int:pk>/runs/": [Case("GET", "/projects/{project}/runs/", VIEWERS, page=True)],
    "snapshots/<int:snapshot_id>/": [Case("GET", "/snapshots/{snapshot}/", VIEWERS, page=True)],
    "snapshots/<int:snapshot_id>/download": [Case("GET", "/snapshots/{snapshot}/download", VIEWERS, page=True)],
    "snapshots/<int:snapshot_id>/delete": [Case("POST", "/snapshots/{snapshot}/delete", MANAGERS, page=True)],
    "jobs/<int:job_id>/": [Case("GET", "/jobs/{job}/", VIEWERS, page=True)],
    "jobs/<int:job_id>/<str:action>": [Case("POST", "/jobs/{job}/cancel", MANAGERS, page=True)],
    "models/<int:model_id>/evaluation": [Case("GET", "/models/{model}/evaluation", VIEWERS, page=True)],
    "models/<int:model_id>/download": [Case("GET", "/models/{vlm_model}/download", VIEWERS, page=True)],
    "models/<int:model_id>/vlm-evaluation": [Case("GET", "/models/{vlm_model}/vlm-evaluation", VIEWERS, page=True)],
    "models/<int:model_id>/rlinf-export": [Case("POST", "/models/{vlm_model}/rlinf-export", MANAGERS, page=True)],
    "api/models/<int:model_id>/rlinf-export": [
        Case("GET", "/api/models/{vlm_model}/rlinf-export", VIEWERS | {"training"}),
        Case("POST", "/api/models/{vlm_model}/rlinf-export", MANAGERS | {"training"}),
    ],
    "models/<int:model_id>/deploy": [
        Case("GET", "/models/{model}/deploy", MANAGERS, page=True),
        Case("POST", "/models/{model}/deploy", MANAGERS, page=True, body={"name": ""}),
    ],
    "api/projects/<int:pk>/snapshots": [
        Case("GET", "/api/projects/{project}/snapshots", VIEWERS | {"training"}),
        Case("POST", "/api/projects/{project}/snapshots", MANAGERS | {"training"}, body={"options": "none"}),
    ],
    "api/snapshots/<int:snapshot_id>": [Case("GET", "/api/snapshots/{snapshot}", VIEWERS | {"training"})],
    "api/projects/<int:pk>/jobs": [
        Case("GET", "/api/projects/{project}/jobs", VIEWERS | {"training"}),
        Case("POST", "/api/projects/{project}/jobs", MANAGERS | {"training"}, body={}),
    ],
    "api/jobs/<int:job_id>": [
        Case("GET", "/api/jobs/{job}", VIEWERS | {"training"}),
        Case("DELETE", "/api/jobs/{job}", MANAGERS | {"training"}),
    ],
    "api/jobs/<int:job_id>/cancel": [Case("POST", "/api/jobs/{job}/cancel", MANAGERS | {"training"})],
    "api/jobs/<int:job_id>/retry": [Case("POST", "/api/jobs/{job}/retry", MANAGERS | {"training"})],
    "api/jobs/<int:job_id>/metrics": [Case("GET", "/api/jobs/{job}/metrics", VIEWERS | {"training"})],
    "api/models/<int:model_id>/evaluation": [
        Case("GET", "/api/models/{model}/evaluation?threshold=2", VIEWERS | {"training"})
    ],
    # -- inference -----------------------------------------------------------------------------------
    "api/deployments/": [
        # filtered to what each may see; a token without `rewards` is refused, as on the detail view
        Case("GET", "/api/deployments/", set(PEOPLE) | {"rewards", "elsewhere"}),
        Case(
            "POST",
            "/api/deployments/",
            MANAGERS,
            body={"trained_model": "{model}", "name": "not a slug!"},
            refuse={"outsider": 404, "elsewhere": 403},  # agents never deploy
        ),
    ],
    "api/deployments/<slug:name>/": [
        Case("GET", "/api/deployments/{deployment}/", VIEWERS | {"rewards"}),
        Case("PATCH", "/api/deployments/{deployment}/", MANAGERS, body={"threshold": "high"}),
        Case("DELETE", "/api/deployments/{deployment}/", MANAGERS),  # rolled back, as every case
    ],
    "api/deployments/<slug:name>/pause": [Case("POST", "/api/deployments/{deployment}/pause", MANAGERS)],
    "api/deployments/<slug:name>/resume": [Case("POST", "/api/deployments/{deployment}/resume", MANAGERS)],
    "api/deployments/<slug:name>/history": [
        Case("GET", "/api/deployments/{deployment}/history", VIEWERS | {"rewards"})
    ],
    "deployments/<slug:name>/": [Case("GET", "/deployments/{deployment}/", VIEWERS, page=True)],
    "deployments/<slug:name>/switch": [
        Case("POST", "/deployments/{deployment}/switch", MANAGERS, page=True, body={"model": "x"})
    ],
    "deployments/<slug:name>/settings": [
        Case("POST", "/deployments/{deployment}/settings", MANAGERS, page=True, body={"threshold": "high"})
    ],
    "deployments/<slug:name>/pause": [
        Case("POST", "/deployments/{deployment}/pause", MANAGERS, page=True, body={"paused": "1"})
    ],
    "deployments/<slug:name>/delete": [Case("GET", "/deployments/{deployment}/delete", MANAGERS, page=True)],
    "api/deployments/<slug:name>/model": [
        Case("POST", "/api/deployments/{deployment}/model", MANAGERS | {"training"}, body={"trained_model": "x"})
    ],
    # what the caller may do: anyone who sees the deployment asks (a token lacking a scope hears which)
    "api/deployments/<slug:name>/access": [
        Case("GET", "/api/deployments/{deployment}/access", VIEWERS | (set(AGENTS) - {"elsewhere"}))
    ],
    "api/deployments/<slug:name>/health": [Case("GET", "/api/deployments/{deployment}/health", VIEWERS | {"rewards"})],
    "api/deployments/<slug:name>/monitor": [
        Case("GET", "/api/deployments/{deployment}/monitor?hours=1", VIEWERS | {"rewards"})
    ],
    "deployments/<slug:name>/monitor": [
        Case("GET", "/deployments/{deployment}/monitor", VIEWERS, page=True),
        Case("POST", "/deployments/{deployment}/monitor", MANAGERS, page=True, body={"hold_s": "x"}),
    ],
    # the same-host path's boot id and the caller's own segment key: no project data; the rewards scope
    "api/shm": [Case("GET", "/api/shm", set(PEOPLE) | {"rewards", "elsewhere"})],
    "api/deployments/<slug:name>/rewards": [
        Case("POST", "/api/deployments/{deployment}/rewards", VIEWERS | {"rewards"}, body={})
    ],
    "api/deployments/<slug:name>/vlm/rewards": [
        Case("POST", "/api/deployments/{vlm_deployment}/vlm/rewards", VIEWERS | {"rewards"}, body={})
    ],
    "v1/chat/completions": [
        Case(
            "POST",
            "/v1/chat/completions",
            VIEWERS | {"rewards"},
            body={"model": "{vlm_deployment}", "messages": [{"role": "user", "content": "no images"}]},
        )
    ],
    "deployments/": [Case("GET", "/deployments/", set(PEOPLE), page=True)],
    "deployments/<slug:name>/gallery": [Case("GET", "/deployments/{deployment}/gallery", VIEWERS, page=True)],
    "deployments/<slug:name>/gallery/<int:frame_id>/label": [
        Case("POST", "/deployments/{deployment}/gallery/{served_frame}/label", VIEWERS, page=True, body={})
    ],
    "teleop/": [Case("GET", "/teleop/", set(PEOPLE), page=True)],
    "teleop/<int:session_id>/": [Case("GET", "/teleop/{session}/", VIEWERS, page=True)],
    "api/teleop/sessions/": [Case("GET", "/api/teleop/sessions/", set(PEOPLE) | {"teleop", "elsewhere"})],
}


def default_refusal(caller: str, case: Case) -> int:
    if caller == "anon" or (case.page and caller in AGENTS):
        return 302 if case.page else 401
    if caller in ("outsider", "elsewhere"):
        return 404
    return 403  # a member with too small a role, or a token on P without the scope (or episode)


def expected(caller: str, case: Case) -> int | None:
    """The refusal code, or None when the caller is allowed."""
    if caller in case.allow:
        return None
    return case.refuse.get(caller, default_refusal(caller, case))


def _routes(patterns, prefix: str = "") -> list[tuple[str, object]]:
    found = []
    for entry in patterns:
        route = prefix + str(entry.pattern)
        if isinstance(entry, URLResolver):
            found.extend(_routes(entry.url_patterns, route))
        elif isinstance(entry, URLPattern):
            found.append((route, entry.callback))
    return found


def _methods(callback) -> set[str]:
    view = getattr(callback, "cls", None) or getattr(callback, "view_class", None)
    if view is None:
        return set()
    return {m.upper() for m in ("get", "post", "put", "patch", "delete") if hasattr(view, m)}


def test_every_route_and_method_has_a_matrix_entry():
    missing = []
    for route, callback in _routes(get_resolver().url_patterns):
        if route in EXEMPT or route.startswith("admin/"):
            continue
        if route not in MATRIX:
            missing.append(route)
            continue
        methods = _methods(callback)
        covered = {case.method for case in MATRIX[route]}
        missing.extend(f"{method} {route}" for method in methods - covered)
    assert not missing, f"routes without an access decision in the matrix: {missing}"


def test_every_websocket_has_a_matrix_entry():
    from webapp.routing import websocket_urlpatterns

    routes = {route for route, _ in _routes(websocket_urlpatterns())}
    assert routes == set(WS_MATRIX), f"WebSocket routes and matrix differ: {routes ^ set(WS_MATRIX)}"


# ---- the world -----------------------------------------------------------------------------------------


def _png() -> bytes:
    buffer = io.BytesIO()
    Image.fromarray(np.zeros((8, 8, 3), dtype=np.uint8)).save(buffer, format="PNG")
    return buffer.getvalue()


def _empty_evaluation() -> dict:
    from training.vlm.labels import LABELS

    return {
        "windows": [],
        "wrong": [],
        "accuracy": None,
        "per_class": {label: {"precision": None, "recall": None, "support": 0} for label in LABELS},
        "confusion": [[0] * len(LABELS) for _ in LABELS],
    }


def build_world(django_user_model) -> dict:
    from common.images.checks import check_image
    from inference.models import Deployment, ServedFrame
    from inference.teleop.models import TeleopSession
    from labeling.ingest.services import StepInput, episode_create, steps_append
    from labeling.models import ImportJob, ProposalJob
    from projects.access import ALL_SCOPES
    from projects.models import Membership, Project
    from projects.services import agent_create
    from training.models import DatasetSnapshot, TrainedModel, TrainingJob
    from training.vlm.train import EVALUATION_FILE

    project = Project.objects.create(name="Matrix")
    other = Project.objects.create(name="Elsewhere")
    people = {}
    for name in PEOPLE:
        if name == "admin":
            people[name] = django_user_model.objects.create_superuser("m-admin", "a@example.com", "pw-admin-123")
            continue
        people[name] = django_user_model.objects.create_user(f"m-{name}", password="pw-matrix-123")
        if name in MEMBERS:
            Membership.objects.create(project=project, user=people[name], role=name)
    Membership.objects.create(project=other, user=people["outsider"], role="manager")
    agents, tokens = {}, {}
    for name in AGENTS:
        scope = "ingest" if name == "ingest2" else name
        if name == "elsewhere":
            agents[name], tokens[name] = agent_create(name=f"m-{name}", scopes=ALL_SCOPES, projects=[other])
        else:
            agents[name], tokens[name] = agent_create(name=f"m-{name}", scopes=[scope], projects=[project])
    episode, _ = episode_create(project=project, uuid=uuid.uuid4(), agent=agents["ingest"])
    steps_append(
        episode=episode, steps=[StepInput(index=0, images={"main": check_image(_png(), max_side=64, max_pixels=4096)})]
    )
    folder = f"snapshots/project_{project.pk}/snapshot_1"
    default_storage.save(f"{folder}/labels.json", ContentFile(b"{}"))
    snapshot = DatasetSnapshot.objects.create(project=project, number=1, status="ready", folder=folder)
    job = TrainingJob.objects.create(project=project, snapshot=snapshot, status="failed", config={})
    model = TrainedModel.objects.create(project=project, job=job, name="m", checkpoint_path=job.checkpoint_folder)
    vlm_folder = f"checkpoints/vlm_{uuid.uuid4().hex[:8]}"
    vlm_model = TrainedModel.objects.create(project=project, kind="vlm", name="v", checkpoint_path=vlm_folder)
    default_storage.save(f"{vlm_folder}/{EVALUATION_FILE}", ContentFile(json.dumps(_empty_evaluation()).encode()))
    deployment = Deployment.objects.create(name=f"m-{uuid.uuid4().hex[:6]}", trained_model=model, project=project)
    vlm_deployment = Deployment.objects.create(
        name=f"v-{uuid.uuid4().hex[:6]}", trained_model=vlm_model, project=project
    )
    served = ServedFrame.objects.create(
        deployment=deployment, image=f"served/{deployment.pk}/x.png", probability=0.9, success=True
    )
    session = TeleopSession.objects.create(agent=agents["teleop"], project=project)
    import_job = ImportJob.objects.create(project=project, folder="imports/matrix")
    proposal_job = ProposalJob.objects.create(project=project)
    from labeling.imports.lerobot.export_jobs import export_job_start

    ids = {
        "project": project.pk,
        "episode": episode.uuid,
        "new_uuid": uuid.uuid4(),
        "frame_path": episode.steps.get().frames.get().image.name,
        "snapshot": snapshot.pk,
        "job": job.pk,
        "model": model.pk,
        "vlm_model": vlm_model.pk,
        "deployment": deployment.name,
        "vlm_deployment": vlm_deployment.name,
        "served_frame": served.pk,
        "session": session.pk,
        "import_job": import_job.pk,
        "proposal_job": proposal_job.pk,
        "export_token": export_job_start(project=project, fps=10),  # queued: its worker task is never sent
    }
    return {"ids": ids, "people": people, "agents": agents, "tokens": tokens, "project": project}


@pytest.fixture(scope="module")
def world(django_db_setup, django_db_blocker):
    """Built once; everything (also what requests write) is rolled back at the end of the module."""
    from django.contrib.auth import get_user_model

    with django_db_blocker.unblock():
        outer = transaction.atomic()
        outer.__enter__()
        try:
            data = build_world(get_user_model())
            clients = {"anon": Client()}
            for name, person in data["people"].items():
                clients[name] = Client()
                clients[name].force_login(person)
            for name, token in data["tokens"].items():
                clients[name] = APIClient()
                clients[name].credentials(HTTP_AUTHORIZATION=f"Bearer {token}")
            data["clients"] = clients
            yield data
        finally:
            transaction.set_rollback(True)
            outer.__exit__(None, None, None)


def _fill(value, ids):
    if isinstance(value, str):
        return value.format(**ids)
    if isinstance(value, dict):
        return {k: _fill(v, ids) for k, v in value.items()}
    if isinstance(value, list):
        return [_fill(v, ids) for v in value]
    return value


def _ask(client, case: Case, ids: dict):
    url = _fill(case.url, ids)
    body = _fill(case.body, ids) if case.body is not None else None
    method = getattr(client, case.method.lower())
    with transaction.atomic():
        if case.page:
            response = method(url, body or {})
        elif body is None:
            response = method(url)
        else:
            response = method(url, body, content_type="application/json")
        transaction.set_rollback(True)
    return response


CASES = [(route, case) for route, cases in MATRIX.items() for case in cases]


@pytest.mark.parametrize(("route", "case"), CASES, ids=[f"{c.method} {r or '/'}" for r, c in CASES])
def test_route_answers_each_caller_as_designed(world, route, case):
    from inference.serving import forget_deployment

    forget_deployment(world["ids"]["deployment"])
    forget_deployment(world["ids"]["vlm_deployment"])
    wrong = []
    for caller in CALLERS:
        response = _ask(world["clients"][caller], case, world["ids"])
        refusal = expected(caller, case)
        code = response.status_code
        if refusal is None:
            if (
                code in (401, 403, 404)
                or code >= 500
                or (code == 302 and "/accounts/login" in response.get("Location", ""))
            ):
                wrong.append(f"{caller}: allowed, got {code}")
        elif code != refusal:
            wrong.append(f"{caller}: expected {refusal}, got {code}")
        elif code == 302 and "/accounts/login" not in response["Location"]:
            wrong.append(f"{caller}: redirected to {response['Location']}, not the login page")
    assert not wrong, f"{case.method} {route}: " + "; ".join(wrong)


# ---- WebSockets --------------------------------------------------------------------------------------

# route -> (callers allowed to connect, refusal close codes by caller kind)
WS_MATRIX = {
    "ws/jobs/<int:job_id>/": VIEWERS | {"training"},
    "ws/teleop/sessions/<int:session_id>/": VIEWERS,
    "ws/teleop/agent/": {"teleop", "elsewhere"},
}


def ws_refusal(caller: str, route: str) -> int:
    if caller == "anon":
        return 4401
    if route == "ws/teleop/agent/":
        return 4401 if caller in PEOPLE else 4403
    if route.startswith("ws/teleop/sessions") and caller in AGENTS:
        return 4401  # viewers are people
    if caller in ("outsider", "elsewhere"):
        return 4404
    return 4403


@pytest.mark.django_db(transaction=True)
def test_websockets_answer_each_caller_as_designed(django_user_model):
    from projects.auth import AgentTokenMiddleware
    from webapp.routing import websocket_urlpatterns

    data = build_world(django_user_model)
    ids = data["ids"]
    app = AgentTokenMiddleware(URLRouter(websocket_urlpatterns()))
    paths = {
        "ws/jobs/<int:job_id>/": f"/ws/jobs/{ids['job']}/",
        "ws/teleop/sessions/<int:session_id>/": f"/ws/teleop/sessions/{ids['session']}/",
        "ws/teleop/agent/": "/ws/teleop/agent/",
    }

    async def attempt(caller: str, path: str):
        headers = []
        if caller in AGENTS:
            headers.append((b"authorization", f"Bearer {data['tokens'][caller]}".encode()))
        comm = WebsocketCommunicator(app, path, headers=headers)
        comm.scope["user"] = data["people"].get(caller) or AnonymousUser()
        connected, code = await comm.connect(timeout=5)
        reply = None
        if connected and path == "/ws/teleop/agent/":
            await comm.send_json_to({"type": "hello", "project": data["project"].name, "cameras": ["main"]})
            reply = await comm.receive_json_from(timeout=5)
        if connected:
            await comm.disconnect()
        return connected, code, reply

    async def attempts():  # one event loop for all (the channel layer's connections belong to it)
        return {(route, caller): await attempt(caller, paths[route]) for route in WS_MATRIX for caller in CALLERS}

    results = async_to_sync(attempts)()
    wrong = []
    for route, allowed in WS_MATRIX.items():
        for caller in CALLERS:
            connected, code, reply = results[route, caller]
            if caller in allowed:
                if not connected:
                    wrong.append(f"{route} {caller}: refused with {code}")
                elif route == "ws/teleop/agent/":
                    # A teleop token on another project connects but cannot open a session in P.
                    want = "error" if caller == "elsewhere" else "session"
                    if reply.get("type") != want:
                        wrong.append(f"{route} {caller}: hello answered {reply}")
            elif connected or code != ws_refusal(caller, route):
                wrong.append(f"{route} {caller}: expected close {ws_refusal(caller, route)}, got {connected, code}")
    assert not wrong, "; ".join(wrong)
