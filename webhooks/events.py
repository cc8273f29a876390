"""Event names and payload signing. No Django here.

A delivery is a POST whose body is the JSON event and whose `X-RS-Signature` header is
`sha256=<hex HMAC-SHA256 of the raw body with the webhook's secret>`; the body carries the event's id and
time, so a receiver can drop replays. Verify with `verify(secret, body, header)` (or its five lines in
any language).
"""

from __future__ import annotations

import hashlib
import hmac

JOB_SUCCEEDED = "job.succeeded"
JOB_FAILED = "job.failed"
SNAPSHOT_READY = "snapshot.ready"
DEPLOYMENT_SWITCHED = "deployment.switched"
DEPLOYMENT_UNHEALTHY = "deployment.unhealthy"
ALARM_RAISED = "alarm.raised"  # the reward-hacking monitor's alarm (inference/monitor/services.py)

EVENTS = {
    JOB_SUCCEEDED: "Training job succeeded",
    JOB_FAILED: "Training job failed",
    SNAPSHOT_READY: "Dataset snapshot ready",
    DEPLOYMENT_SWITCHED: "Deployment switched to another model",
    DEPLOYMENT_UNHEALTHY: "Deployment became unhealthy",
    ALARM_RAISED: "Reward-hacking alarm raised on a deployment",
}

SIGNATURE_HEADER = "X-RS-Signature"
EVENT_HEADER = "X-RS-Event"
DELIVERY_HEADER = "X-RS-Delivery"

MAX_ATTEMPTS = 6
BACKOFF_BASE_S = 10
BACKOFF_MAX_S = 3600


def sign(secret: str, body: bytes) -> str:
    return "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


def verify(secret: str, body: bytes, header: str) -> bool:
    return hmac.compare_digest(sign(secret, body), header or "")


def backoff_s(attempt: int) -> int:
    """Wait before retry number `attempt` (1-based): 10 s, 20 s, 40 s, ... at most an hour."""
    return min(BACKOFF_MAX_S, BACKOFF_BASE_S * 2 ** max(0, attempt - 1))


def unknown_events(names: list[str]) -> list[str]:
    return sorted(set(names) - set(EVENTS))
