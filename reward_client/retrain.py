"""A retrain of a deployment's model driven from an RL loop that must not wait: each `retrain_advance` call
makes the calls that need no waiting and returns; nothing sleeps and no thread runs.

The steps, each a background job on the service: env success turned into frame proposals
(`POST /api/projects/<id>/proposals/generate`), a snapshot of the project's labels, a training job on it.
When the job succeeded, the served model and the new one are evaluated on the new snapshot's validation
split at the deployment's threshold (`GET /api/models/<id>/evaluation`), and the deployment is switched to
the new model only when its accuracy is higher (`POST /api/deployments/<name>/model`).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from .errors import RewardServiceError

RUNNING = ("queued", "running")


@dataclass
class Retrain:
    project: int
    snapshot_options: dict
    job_kind: str
    job_config: dict
    deadline: float  # time.monotonic() by which the job must have finished
    phase: str = "proposals"  # proposals -> snapshot -> job -> done | failed
    poll_url: str = ""
    snapshot: dict = field(default_factory=dict)
    job: dict = field(default_factory=dict)
    result: dict = field(default_factory=dict)

    @property
    def finished(self) -> bool:
        return self.phase in ("done", "failed")


def retrain_start(service: Any, *, project: int, timeout_s: float, **options: Any) -> Retrain:
    """Ask for proposals (the first step) and return the retrain under way."""
    run = Retrain(project=project, deadline=time.monotonic() + timeout_s, **options)
    generation = service.call("POST", f"/api/projects/{project}/proposals/generate", json={}) or {}
    run.poll_url = generation.get("url", "")
    _after_proposals(service, run, generation)
    return run


def retrain_advance(service: Any, run: Retrain) -> Retrain:
    """One look at the step under way; the next steps started where it ended. A service error or the
    deadline ends the retrain as `failed` with the reason in `result["error"]` (the served model stays)."""
    if run.finished:
        return run
    try:
        if time.monotonic() > run.deadline:
            raise RewardServiceError(f"the retrain did not finish in time (phase {run.phase})")
        if run.phase == "proposals":
            _after_proposals(service, run, service.call("GET", run.poll_url))
        elif run.phase == "snapshot":
            _after_snapshot(service, run, service.call("GET", run.poll_url))
        elif run.phase == "job":
            _after_job(service, run, service.call("GET", run.poll_url))
    except RewardServiceError as exc:
        run.phase, run.result = "failed", {**run.result, "error": str(exc)}
    return run


def _after_proposals(service: Any, run: Retrain, generation: dict) -> None:
    status = generation.get("status")
    if status in RUNNING:
        return
    if status in ("failed", "cancelled"):
        raise RewardServiceError(f"proposal generation {status}: {generation.get('error')}")
    snapshot = service.call("POST", f"/api/projects/{run.project}/snapshots", json={"options": run.snapshot_options})
    run.phase, run.poll_url = "snapshot", snapshot.get("url") or f"/api/snapshots/{snapshot['id']}"
    _after_snapshot(service, run, snapshot)


def _after_snapshot(service: Any, run: Retrain, snapshot: dict) -> None:
    run.snapshot = snapshot
    if snapshot["status"] == "building":
        return
    if snapshot["status"] != "ready":
        raise RewardServiceError(f"snapshot #{snapshot['number']} {snapshot['status']}: {snapshot.get('error')}")
    body = {"snapshot": snapshot["number"], "kind": run.job_kind, "config": run.job_config}
    job = service.call("POST", f"/api/projects/{run.project}/jobs", json=body)
    run.phase, run.poll_url = "job", f"/api/jobs/{job['id']}"
    _after_job(service, run, job)


def _after_job(service: Any, run: Retrain, job: dict) -> None:
    run.job = job
    if job["status"] not in ("succeeded", "failed", "cancelled"):
        return
    if job["status"] != "succeeded" or not job.get("models"):
        raise RewardServiceError(f"training job {job['id']} {job['status']}: {job.get('error') or 'no model'}")
    run.result = {"snapshot": run.snapshot["number"], "job": job["id"], "model": job["models"][0]}
    run.result.update(deploy_if_better(service, new_model=job["models"][0], snapshot_id=run.snapshot["id"]))
    run.phase = "done"


def deploy_if_better(service: Any, *, new_model: int, snapshot_id: int) -> dict:
    """Compare the served model and `new_model` on the snapshot's validation split (accuracy at the
    deployment's threshold); switch the deployment when the new one is better. What was compared."""
    deployment = f"/api/deployments/{service.deployment}"
    info = service.call("GET", f"{deployment}/")
    served, threshold = info["trained_model"], float(info["threshold"])
    if served == new_model:
        return {"redeployed": False, "reason": "already served"}
    query = {"snapshot": snapshot_id, "threshold": threshold}
    new = service.call("GET", f"/api/models/{new_model}/evaluation", params=query)
    new_accuracy = float(new["summary"]["at_threshold"]["accuracy"])
    try:
        old = service.call("GET", f"/api/models/{served}/evaluation", params=query)
        old_accuracy: float | None = float(old["summary"]["at_threshold"]["accuracy"])
    except RewardServiceError as exc:  # e.g. the served model belongs to another project: keep it
        return {"redeployed": False, "new_accuracy": new_accuracy, "reason": f"served model not comparable: {exc}"}
    out = {"old_model": served, "old_accuracy": old_accuracy, "new_accuracy": new_accuracy}
    if old_accuracy is not None and new_accuracy > old_accuracy:
        switched = service.call("POST", f"{deployment}/model", json={"trained_model": new_model})
        return {**out, "redeployed": True, "version": switched.get("version")}
    return {**out, "redeployed": False, "reason": "not more accurate than the served model"}
