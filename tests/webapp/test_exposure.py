"""Least exposure: anonymous /healthz says only booleans and anonymous /metrics from off this machine is
refused; OPTIONS on the API docs is no server error; webhook targets on private addresses are refused in the
admin; a trusted network's tokenless callers reach rewards but not a deployment's monitor or health data."""

from __future__ import annotations

import socket

import pytest

from webhooks.targets import TargetRefused, target_check

pytestmark = pytest.mark.django_db

PARTS = ("database", "redis", "workers", "deployments")


@pytest.fixture
def deployment(project):
    from inference.models import Deployment
    from training.models import TrainedModel

    model = TrainedModel.objects.create(project=project, kind="resnet", name="m", checkpoint_path="x.pt", config={})
    return Deployment.objects.create(
        project=project, trained_model=model, name="secret-arm", status="unhealthy", error="boom at /srv/x"
    )


def test_anonymous_healthz_says_booleans_only_and_the_token_gets_details(client, admin_user, deployment, settings):
    settings.METRICS_TOKEN = "s3cret"
    anonymous = client.get("/healthz")
    assert anonymous.status_code == 503
    assert set(anonymous.json()) == {"ok", *PARTS, "processes"} and anonymous.json()["deployments"] == {"ok": False}
    assert all(set(anonymous.json()[part]) == {"ok"} for part in PARTS)
    assert all(isinstance(up, bool) for up in anonymous.json()["processes"].values())  # up/down per process kind
    assert b"secret-arm" not in anonymous.content and b"boom" not in anonymous.content
    detailed = client.get("/healthz", HTTP_AUTHORIZATION="Bearer s3cret").json()
    assert {d["name"]: d["error"] for d in detailed["deployments"]} == {"secret-arm": "boom at /srv/x"}
    client.force_login(admin_user)
    assert client.get("/healthz").json()["deployments"][0]["name"] == "secret-arm"


def test_anonymous_metrics_only_from_this_machine_without_a_token(client, deployment, settings):
    settings.METRICS_TOKEN = ""
    assert client.get("/metrics", REMOTE_ADDR="203.0.113.7").status_code == 401
    assert client.get("/metrics", REMOTE_ADDR="127.0.0.1").status_code == 200
    settings.METRICS_TOKEN = "s3cret"
    assert client.get("/metrics", REMOTE_ADDR="127.0.0.1").status_code == 401
    assert client.get("/metrics", REMOTE_ADDR="203.0.113.7", HTTP_AUTHORIZATION="Bearer s3cret").status_code == 200


def test_options_on_the_api_docs_is_answered(user_client):
    for path in ("/api/docs/", "/api/redoc/"):
        answer = user_client.options(path)
        assert answer.status_code == 204 and answer["Allow"] == "GET, HEAD, OPTIONS"
        assert user_client.get(path).status_code == 200


def fake_resolver(*addresses: str):
    def resolve(host, port, type=0):
        return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", (a, port)) for a in addresses]

    return resolve


@pytest.mark.parametrize(
    "addresses",
    [
        ("127.0.0.1",),
        ("169.254.169.254",),
        ("10.1.2.3",),
        ("93.184.216.34", "192.168.0.5"),
        ("::1",),
        ("::ffff:127.0.0.1",),
    ],
)
def test_webhook_targets_on_private_addresses_are_refused(addresses):
    with pytest.raises(TargetRefused, match="WEBHOOK_ALLOW_PRIVATE_TARGETS"):
        target_check("https://hooks.example.org/x", allow_private=False, resolve=fake_resolver(*addresses))
    target_check("https://hooks.example.org/x", allow_private=True, resolve=fake_resolver(*addresses))


def test_a_public_webhook_target_passes_and_the_admin_form_refuses_loopback(project, settings):
    from webhooks.admin import WebhookForm

    target_check("https://hooks.example.org/x", allow_private=False, resolve=fake_resolver("93.184.216.34"))
    settings.WEBHOOK_ALLOW_PRIVATE_TARGETS = False
    data = {
        "project": project.pk,
        "url": "http://127.0.0.1:6379/",
        "events": ["job.failed"],
        "active": True,
        "secret": "s",
    }
    form = WebhookForm(data=data)
    assert not form.is_valid() and "loopback" in form.errors["url"][0]
    settings.WEBHOOK_ALLOW_PRIVATE_TARGETS = True
    assert WebhookForm(data=data).is_valid(), WebhookForm(data=data).errors


def test_trusted_networks_reach_rewards_but_not_monitor_or_deployment_health(client, deployment, settings, user):
    settings.TRUSTED_CIDRS = ["127.0.0.0/8"]
    for path in (f"/api/deployments/{deployment.name}/health", f"/api/deployments/{deployment.name}/monitor"):
        assert client.get(path, REMOTE_ADDR="127.0.0.1").status_code in (401, 403), path
    # a logged-in person who is no member is judged as themselves, not as a trusted client
    from django.contrib.auth import get_user_model

    outsider = get_user_model().objects.create_user("outsider", password="pw-outsider-123")
    client.force_login(outsider)
    answer = client.post(f"/api/deployments/{deployment.name}/rewards", data={}, REMOTE_ADDR="127.0.0.1")
    assert answer.status_code in (403, 404), answer.content
