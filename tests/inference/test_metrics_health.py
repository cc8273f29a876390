"""Metrics and health of the running service: real reward traffic through the web process and a real
inference worker moves the Prometheus counters of both; /healthz reports each part and turns 503."""

from __future__ import annotations

import pytest
import requests
from prometheus_client.parser import text_string_to_metric_families

from reward_client import RewardClient

from .conftest import deploy, make_trained_model, random_images

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]


@pytest.fixture
def token(project):
    from projects.services import agent_create

    return agent_create(name="rl-metrics", kind="rl_worker", projects=[project])[1]


def scrape(url: str) -> dict[tuple[str, frozenset], float]:
    response = requests.get(url, timeout=30)
    assert response.status_code == 200, response.text
    return {
        (sample.name, frozenset(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(response.text)
        for sample in family.samples
    }


def value(samples: dict, name: str, **labels) -> float:
    """Sum of the samples named `name` whose labels include `labels`."""
    want = set(labels.items())
    return sum(v for (n, ls), v in samples.items() if n == name and want <= ls)


def test_reward_traffic_moves_web_and_worker_metrics(project, token, live_server_url, inference_worker_process):
    deployment = deploy(make_trained_model(project, seed=41), max_batch_size=8)
    web_url, worker_url = f"{live_server_url}/metrics", inference_worker_process.metrics_url
    endpoint = "api/deployments/<slug:name>/rewards"
    before_web, before_worker = scrape(web_url), scrape(worker_url)
    assert value(before_web, "rs_http_requests_total", deployment=deployment.name) == 0

    client = RewardClient(live_server_url, token, deployment.name)
    for n in (1, 3, 2):
        client.compute_rewards(random_images(n, seed=n))
    # a JSON body goes through Django's view (and the middleware), the .npy ones through the fast path
    requests.post(
        f"{live_server_url}/api/deployments/{deployment.name}/rewards",
        json={"images": []},
        headers={"Authorization": f"Bearer {token}"},
        timeout=30,
    )

    web, worker = scrape(web_url), scrape(worker_url)
    ok = {"endpoint": endpoint, "deployment": deployment.name}
    assert value(web, "rs_http_requests_total", status="2xx", **ok) == 3
    assert value(web, "rs_http_requests_total", status="4xx", **ok) == 1
    assert value(web, "rs_http_request_seconds_count", **ok) == 4
    assert value(web, "rs_http_request_seconds_sum", **ok) > 0
    assert value(web, "rs_deployment_healthy", deployment=deployment.name) == 1
    assert value(web, "rs_queue_depth", queue=f"inference:{deployment.name}") == 0
    assert ("rs_queue_depth", frozenset({("queue", "celery:training")})) in web
    assert value(web, "rs_training_jobs", state="queued") >= 0 and value(web, "rs_inference_workers_alive") >= 1

    # Every worker on this Redis serves the deployment, and in the full suite another test module's worker
    # may still be up and take some batches: this worker served some of the 6 items, and its batch sizes
    # add up to exactly what it counted.
    # If the other worker took every batch, single images follow until this one has served one.
    d = {"deployment": deployment.name}
    served = value(worker, "rs_inference_items_total", **d) - value(before_worker, "rs_inference_items_total", **d)
    extra = 0
    while served == 0 and extra < 30:
        client.compute_rewards(random_images(1, seed=100 + extra))
        extra += 1
        worker = scrape(worker_url)
        served = value(worker, "rs_inference_items_total", **d) - value(before_worker, "rs_inference_items_total", **d)
    assert 1 <= served <= 6 + extra
    assert value(worker, "rs_inference_batch_size_count", **d) >= 1
    assert value(worker, "rs_inference_batch_size_sum", **d) == served
    assert value(worker, "rs_model_load_seconds_count", **d) == 1
    assert value(worker, "rs_model_load_seconds_sum", **d) > 0


def test_healthz_reports_each_part_and_turns_503(project, live_server_url, inference_worker_process):
    from inference.services import deployment_set_health

    deployment = deploy(make_trained_model(project, seed=42))
    deployment_set_health(name=deployment.name, version=deployment.version, error="")
    healthy = requests.get(f"{live_server_url}/healthz", timeout=30)
    parts = ("database", "redis", "workers", "deployments")
    body = healthy.json()
    assert {part: body[part] for part in parts} == {part: {"ok": True} for part in parts}  # anonymous: booleans
    processes = body["processes"]
    assert processes["web"] and processes["inference"], processes
    # beat may not run here (tests/webapp/test_process_health.py covers it): the status follows the processes
    assert healthy.status_code == (200 if processes["ok"] else 503) and body["ok"] == processes["ok"]

    deployment_set_health(name=deployment.name, version=None, error="model failed to load: boom")
    sick = requests.get(f"{live_server_url}/healthz", timeout=30)
    assert sick.status_code == 503
    assert sick.json()["deployments"] == {"ok": False} and sick.json()["workers"] == {"ok": True}
    assert deployment.name not in sick.text and "boom" not in sick.text


def test_metrics_token_guards_the_endpoint(client, settings):
    settings.METRICS_TOKEN = "s3cret"
    assert client.get("/metrics").status_code == 401
    response = client.get("/metrics", HTTP_AUTHORIZATION="Bearer s3cret")
    assert response.status_code == 200 and b"rs_queue_depth" in response.content
