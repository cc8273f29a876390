"""Deployment settings within sanity bounds (a reward of 3e63 or a reward of -1.7e308 is refused with a 400
naming the field and its range; sensible values are stored), and the deployment list follows the detail view's
scope: a token without `rewards` is refused, not shown every deployment's settings."""

from __future__ import annotations

import pytest
from rest_framework.test import APIClient

from inference.models import Deployment

pytestmark = pytest.mark.django_db


@pytest.fixture
def manager(user) -> APIClient:
    client = APIClient()
    client.force_login(user)  # alice manages `project`
    return client


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("reward_weight", 3.3e63, "reward_weight must be between -1000 and 1000, got 3.3e+63"),
        ("env_reward_weight", -1001, "env_reward_weight must be between -1000 and 1000"),
        ("success_reward", -1.7e308, "success_reward must be between -1e+06 and 1e+06"),
        ("fail_reward", 2e6, "fail_reward must be between -1e+06 and 1e+06"),
        ("interval_reward", 1e7, "interval_reward must be between"),
        ("gt_success_bonus", -1e9, "gt_success_bonus must be between"),
    ],
)
def test_settings_past_their_bounds_are_a_400_naming_the_field(manager, trained_model, field, value, message):
    created = manager.post("/api/deployments/", {"name": "bounded", "trained_model": trained_model.pk}, format="json")
    assert created.status_code == 201, created.json()
    changed = manager.patch("/api/deployments/bounded/", {field: value}, format="json")
    assert changed.status_code == 400 and message in str(changed.json()), changed.json()
    assert getattr(Deployment.objects.get(name="bounded"), field) != value
    refused = manager.post(
        "/api/deployments/", {"name": "other", "trained_model": trained_model.pk, field: value}, format="json"
    )
    assert refused.status_code == 400 and message in str(refused.json()), refused.json()
    assert not Deployment.objects.filter(name="other").exists()


def test_settings_within_their_bounds_are_stored(manager, trained_model):
    body = {"name": "fine", "trained_model": trained_model.pk, "reward_weight": 1000, "success_reward": -1e6}
    created = manager.post(
        "/api/deployments/", {**body, "env_reward_weight": -0.5, "gt_success_bonus": 5}, format="json"
    )
    assert created.status_code == 201, created.json()
    assert created.json()["reward_weight"] == 1000 and created.json()["success_reward"] == -1e6


def test_the_deployment_list_needs_the_rewards_scope_like_the_detail_view(
    manager, trained_model, project, scoped_agent_client
):
    assert manager.post("/api/deployments/", {"name": "listed", "trained_model": trained_model.pk}).status_code == 201
    _, robot = scoped_agent_client(["ingest", "teleop"], projects=[project])
    listing = robot.get("/api/deployments/")
    assert listing.status_code == 403 and "lacks the 'rewards' scope" in listing.json()["detail"]
    assert b"listed" not in listing.content
    assert robot.get("/api/deployments/listed/").status_code == 403
    _, worker = scoped_agent_client(["rewards"], projects=[project])
    assert [d["name"] for d in worker.get("/api/deployments/").json()] == ["listed"]
