"""Reward-hacking monitor, the stored side: counters in Redis, disagreeing frames, the alarm.

The rewards endpoint only hands each served batch to one background thread (`monitor_submit`); the
thread takes every batch waiting by then and adds them to Redis counters in one pipelined round trip
(plus one to number episode steps; a batch with env flags is recorded on its own, in order; when only
batches without env flags wait, which feed the counters alone, the thread first lets PLAIN_GATHER_S pass
so that one round trip records many: the thread wakes about 20 times a second rather than per request),
keeps a few frames where the model and the env disagree as served frames, and checks the alarm rule
(inference/monitor/rules.py) at most once a second per deployment, and once more by a timer when traffic stops
before a pending breach or a skipped check was decided. When the false-success rate held above
the deployment's threshold for its hold period, the alarm is raised once (a DeploymentMonitor row),
the disagreeing frames of the window join the labeling queue and `alarm_raised` is called.
"""

from __future__ import annotations

import logging
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime

import django.dispatch
from django.db import close_old_connections
from django.utils import timezone

from training.resnet.wire import frame_at

from ..broker import load_npy
from ..serving import DeploymentConfig, sync_redis
from . import rules as monitor

log = logging.getLogger(__name__)

PREFIX = "rs:inf:mon:"
BUCKET_TTL_S = 2 * 24 * 3600
EPISODE_TTL_S = 3600
STEPS_TTL_S = 7 * 24 * 3600
FRAMES_PER_BUCKET = 10  # disagreeing frames kept per deployment and time bucket
MAX_PENDING = 500  # batches waiting for the monitor thread; more are dropped (the monitor is best effort)
SETTINGS_CACHE_S = 5.0
CHECK_EVERY_S = 1.0
PLAIN_GATHER_S = 0.05  # batches without env flags (counters only) wait this long to be recorded together

#: Sent once per raised alarm: webhooks (or anything else) connect a receiver here.
alarm_signal = django.dispatch.Signal()

_executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="reward-monitor")
_pending = 0  # batches submitted and not recorded yet
_queued: list[ServedBatch] = []  # submitted, waiting for the monitor thread
_draining = False  # whether a drain is submitted or running
_lock = threading.Lock()
_settings_cache: dict[int, tuple[float, monitor.MonitorSettings]] = {}
_last_check: dict[int, float] = {}
_recheck_pending: set[int] = set()  # deployments with a timed alarm check waiting


@dataclass
class ServedBatch:
    config: DeploymentConfig
    payload: bytes
    probabilities: list[float | None]
    env_success: list[bool] | None
    episode_ids: list[str] | None
    run: str
    at: float
    ood: list[bool | None] | None = None  # each frame's off-distribution flag (None: the model checks none)


def ood_counts(flags: list[bool | None] | None) -> dict[str, int]:
    """Bucket counter increments for off-distribution frames: `oodn` frames checked, `ood` of them flagged."""
    checked = [flag for flag in flags or [] if flag is not None]
    return {key: value for key, value in (("oodn", len(checked)), ("ood", sum(checked))) if value}


def monitor_submit(batch: ServedBatch) -> bool:
    """Hand a served batch to the monitor thread; False when it was dropped (backlog full)."""
    global _pending, _draining
    if batch.env_success is None and batch.episode_ids is None and not any(p is not None for p in batch.probabilities):
        return False
    with _lock:
        if _pending >= MAX_PENDING:
            return False
        _pending += 1
        _queued.append(batch)
        start, _draining = not _draining, True
    if start:
        _executor.submit(_drain)
    return True


def monitor_flush() -> None:
    """Block until submitted batches are recorded (tests, demos)."""
    _executor.submit(lambda: None).result()


def _drain() -> None:
    """Record the waiting batches, all of them at once, until none is left (one thread hop and a couple
    of round trips for however many batches were served meanwhile)."""
    global _pending, _draining
    close_old_connections()
    try:
        while True:
            with _lock:
                plain_only = bool(_queued) and all(b.env_success is None and b.episode_ids is None for b in _queued)
            if plain_only:  # counters only: let more gather, so one round trip records them all
                time.sleep(PLAIN_GATHER_S)
            with _lock:
                batches = list(_queued)
                _queued.clear()
                if not batches:
                    _draining = False
                    return
            try:
                for group in _groups(batches):
                    monitor_record(group)
            except Exception:  # serving must never notice the monitor
                log.exception("reward monitor could not record %d batches", len(batches))
            finally:
                with _lock:
                    _pending -= len(batches)
    finally:
        close_old_connections()


def _groups(batches: list[ServedBatch]) -> list[list[ServedBatch]]:
    """Batches recorded together: runs of batches without env flags (counters only); a batch with env flags
    goes alone, in order, as its alarm check must see the counters up to it and the frames kept before it."""
    groups: list[list[ServedBatch]] = []
    for batch in batches:
        if batch.env_success is None and groups and groups[-1][-1].env_success is None:
            groups[-1].append(batch)
        else:
            groups.append([batch])
    return groups


def ref_of(name: str, deployment_id: int) -> str:
    """Redis keys name a deployment by name and id, so a name or id used again starts from zero."""
    return f"{name}:{deployment_id}"


def _key(kind: str, ref: str, *parts) -> str:
    return ":".join([f"{PREFIX}{kind}", ref, *map(str, parts)])


def _episode_steps(redis, batches: list[ServedBatch]) -> list[list[int | None]]:
    """Each batch's frames' steps in their episodes (None: no id), numbered by Redis counters per episode
    id, in batch order, in one round trip for all batches."""
    orders: list[dict[str, int]] = []
    pipe = redis.pipeline(transaction=False)
    for batch in batches:
        order: dict[str, int] = {}
        for e in batch.episode_ids or []:
            if e:
                order[e] = order.get(e, 0) + 1
        ref = ref_of(batch.config.name, batch.config.id)
        for episode, count in order.items():
            key = _key("ep", ref, episode)
            pipe.incrby(key, count)
            pipe.expire(key, EPISODE_TTL_S)
        orders.append(order)
    results = pipe.execute() if any(orders) else []
    all_steps: list[list[int | None]] = []
    at = 0
    for batch, order in zip(batches, orders, strict=True):
        next_step = {e: int(results[at + 2 * i]) - order[e] for i, e in enumerate(order)}
        at += 2 * len(order)
        steps: list[int | None] = []
        for e in batch.episode_ids or []:
            if e:
                steps.append(next_step[e])
                next_step[e] += 1
            else:
                steps.append(None)
        all_steps.append(steps)
    return all_steps


def monitor_record(batches: list[ServedBatch]) -> None:
    """Add served batches to the counters (summed per key: one pipelined round trip for all of them, plus
    one to number episode steps), keep disagreeing frames, check the alarms."""
    redis = sync_redis()
    all_steps = _episode_steps(redis, batches)
    increments: dict[str, dict[str, int]] = {}
    expiries: dict[str, int] = {}
    buckets: dict[str, dict[int, float]] = {}  # index key -> bucket -> newest batch time
    for batch, steps in zip(batches, all_steps, strict=True):
        ref, threshold = ref_of(batch.config.name, batch.config.id), batch.config.reward.threshold
        bucket = monitor.bucket_of(batch.at)
        counts = monitor.tally(batch.probabilities, threshold, env_success=batch.env_success, run=batch.run)
        counts.update(ood_counts(batch.ood))
        per_step = monitor.step_tally(batch.probabilities, threshold, steps, batch.env_success) if steps else {}
        for key, values, ttl in (
            (_key("b", ref, bucket), counts, BUCKET_TTL_S),
            (_key("steps", ref), per_step, STEPS_TTL_S),
        ):
            if values:
                total = increments.setdefault(key, {})
                for field, value in values.items():
                    total[field] = total.get(field, 0) + value
                expiries[key] = ttl
        if counts:
            index = buckets.setdefault(_key("idx", ref), {})
            index[bucket] = max(index.get(bucket, 0.0), batch.at)
    pipe = redis.pipeline(transaction=False)
    for key, values in increments.items():
        for field, value in values.items():
            pipe.hincrby(key, field, value)
        pipe.expire(key, expiries[key])
    for key, index in buckets.items():
        pipe.zadd(key, {str(bucket): bucket for bucket in index})
        pipe.zremrangebyscore(key, 0, max(index.values()) - BUCKET_TTL_S)
    dis_at: list[int | None] = []  # where each batch's count of disagreeing frames comes back
    for batch in batches:
        picks = monitor.disagreements(batch.probabilities, batch.config.reward.threshold, batch.env_success)
        if picks:
            key = _key("dis", ref_of(batch.config.name, batch.config.id), monitor.bucket_of(batch.at))
            dis_at.append(len(pipe.command_stack))
            pipe.incrby(key, len(picks))
            pipe.expire(key, 2 * monitor.BUCKET_S)
        else:
            dis_at.append(None)
    results = pipe.execute()
    for batch, steps, at in zip(batches, all_steps, dis_at, strict=True):
        if at is not None:
            picks = monitor.disagreements(batch.probabilities, batch.config.reward.threshold, batch.env_success)
            room = FRAMES_PER_BUCKET - (int(results[at]) - len(picks))
            if room > 0:
                _keep_disagreements(batch, picks[:room], steps)
        if batch.env_success is not None:
            _check_alarm(batch.config, batch.at)


def _keep_disagreements(batch: ServedBatch, picks: list[int], steps: list[int | None]) -> None:
    from ..services import served_frame_create

    images, env = load_npy(batch.payload), batch.env_success or []
    for i in picks:  # picks only scored frames with an env flag (monitor.disagreements)
        p = float(batch.probabilities[i] or 0.0)
        frame = served_frame_create(
            deployment_id=batch.config.id,
            image=frame_at(images, i),
            probability=p,
            success=p > batch.config.reward.threshold,
            model_version=batch.config.version,
        )
        frame.env_success = bool(env[i])
        frame.run = batch.run[: monitor.MAX_RUN_CHARS]
        frame.episode_ref = (batch.episode_ids[i] if batch.episode_ids else "")[: monitor.MAX_EPISODE_CHARS]
        frame.episode_step = steps[i] if steps else None
        frame.save(update_fields=["env_success", "run", "episode_ref", "episode_step"])


def monitor_settings(deployment_id: int) -> monitor.MonitorSettings:
    """The deployment's monitor settings (cached a few seconds per process)."""
    cached = _settings_cache.get(deployment_id)
    now = time.monotonic()
    if cached and now - cached[0] < SETTINGS_CACHE_S:
        return cached[1]
    from ..models import DeploymentMonitor

    row = DeploymentMonitor.objects.filter(deployment_id=deployment_id).first()
    value = settings_of(row) if row else monitor.MonitorSettings()
    _settings_cache[deployment_id] = (now, value)
    return value


def settings_of(row) -> monitor.MonitorSettings:
    return monitor.MonitorSettings(
        enabled=row.enabled,
        false_success_threshold=row.false_success_threshold,
        hold_s=row.hold_s,
        window_s=row.window_s,
        min_items=row.min_items,
    )


def window_counts(ref: str, *, now: float, window_s: float):
    """Counters merged over the buckets that overlap the last `window_s` seconds."""
    redis = sync_redis()
    buckets = redis.zrangebyscore(_key("idx", ref), now - window_s - monitor.BUCKET_S, "+inf")
    pipe = redis.pipeline(transaction=False)
    for b in buckets:
        pipe.hgetall(_key("b", ref, int(b)))
    return monitor.merge(pipe.execute())


def _recheck_later(config: DeploymentConfig, delay_s: float) -> None:
    """Check the alarm again after `delay_s` even if no batch comes: a breach that held its hold period
    (or a check skipped by CHECK_EVERY_S) must raise the alarm after the traffic stopped too."""
    with _lock:
        if config.id in _recheck_pending:
            return
        _recheck_pending.add(config.id)

    def fire() -> None:
        with _lock:
            _recheck_pending.discard(config.id)
        _executor.submit(_recheck, config)

    timer = threading.Timer(max(0.0, delay_s), fire)
    timer.daemon = True
    timer.start()


def _recheck(config: DeploymentConfig) -> None:
    close_old_connections()
    try:
        _check_alarm(config, time.time())
    except Exception:  # the monitor is best effort
        log.exception("reward monitor could not check the alarm of %s", config.name)
    finally:
        close_old_connections()


def _check_alarm(config: DeploymentConfig, now: float) -> None:
    since_last = now - _last_check.get(config.id, 0.0)
    if since_last < CHECK_EVERY_S:
        _recheck_later(config, CHECK_EVERY_S - since_last)
        return
    _last_check[config.id] = now
    settings = monitor_settings(config.id)
    redis = sync_redis()
    ref = ref_of(config.name, config.id)
    above_key = _key("above", ref)
    raw = redis.get(above_key)
    counts = window_counts(ref, now=now, window_s=settings.window_s)
    decision = monitor.alarm_decide(counts, settings, now=now, above_since=float(raw) if raw else None)
    if decision.above_since is None:
        redis.delete(above_key)
    elif raw is None:
        redis.set(above_key, repr(decision.above_since), nx=True, ex=BUCKET_TTL_S)
    due = decision.above_since + settings.hold_s if decision.above_since is not None else None
    if due is not None and due > now and not decision.raise_alarm:
        _recheck_later(config, due - now + 0.05)  # decided then, whether more batches come or not
    if decision.raise_alarm:
        runs = monitor.runs_of(counts)
        worst = max(runs, key=lambda r: runs[r]["false_success_rate"] or 0.0) if runs else ""
        alarm_raise(config=config, rate=decision.false_success_rate or 0.0, run=worst, since=decision.above_since)


def alarm_raise(*, config: DeploymentConfig, rate: float, run: str, since: float | None) -> bool:
    """Raise the deployment's alarm once (until acknowledged); queue the window's disagreeing frames."""
    from ..models import DeploymentMonitor, ServedFrame

    row, _ = DeploymentMonitor.objects.get_or_create(deployment_id=config.id)
    raised_at = timezone.now()
    raised = DeploymentMonitor.objects.filter(pk=row.pk, alarm_since__isnull=True).update(
        alarm_since=raised_at, alarm_rate=rate, alarm_run=run[:100]
    )
    if not raised:
        return False
    start = (since or time.time()) - row.window_s - monitor.BUCKET_S
    frames = ServedFrame.objects.filter(
        deployment_id=config.id,
        env_success=False,
        success=True,
        created_at__gte=datetime.fromtimestamp(start, tz=UTC),
    )
    frame_ids = list(frames.values_list("pk", flat=True))
    ServedFrame.objects.filter(pk__in=frame_ids).update(queued=True)
    _queue_for_labeling(config, frame_ids, raised_at)
    alarm_raised(deployment=config.name, deployment_id=config.id, rate=rate, run=run, frame_ids=frame_ids)
    return True


def _queue_for_labeling(config: DeploymentConfig, frame_ids: list[int], raised_at: datetime) -> None:
    """The alarm's frames join the head of the project's labeling queue (monitor_queue.py); best effort."""
    from .alarm_queue import alarm_frames_enqueue

    try:
        alarm_frames_enqueue(deployment_id=config.id, frame_ids=frame_ids, raised_at=raised_at)
    except Exception:  # the alarm itself must still be raised and announced
        log.exception("could not queue the alarm frames of %s for labeling", config.name)


def alarm_raised(*, deployment: str, deployment_id: int, rate: float, run: str, frame_ids: list[int]) -> None:
    """Hook point, called once per raised alarm: logs it and sends `alarm_signal` (webhooks connect there:
    monitor_webhooks.py)."""
    log.warning(
        "reward-hacking alarm on deployment %s: false-success rate %.2f (run %s); %d frames queued",
        deployment,
        rate,
        run or "-",
        len(frame_ids),
    )
    alarm_signal.send(
        sender=None, deployment=deployment, deployment_id=deployment_id, rate=rate, run=run, frame_ids=frame_ids
    )


def alarm_acknowledge(*, deployment) -> None:
    """A person saw the alarm: clear it (a new breach that holds raises it again)."""
    from ..models import DeploymentMonitor

    DeploymentMonitor.objects.filter(deployment=deployment).update(alarm_since=None, alarm_rate=None, alarm_run="")
    sync_redis().delete(_key("above", ref_of(deployment.name, deployment.pk)))


def monitor_reset(*, deployment) -> None:
    """Forget every counter of a deployment (its alarm state stays)."""
    redis = sync_redis()
    ref = ref_of(deployment.name, deployment.pk)
    keys = [k for kind in ("b", "ep", "dis") for k in redis.scan_iter(match=_key(kind, ref, "*"), count=500)]
    keys += [_key("idx", ref), _key("steps", ref), _key("above", ref)]
    redis.delete(*keys)
    _last_check.pop(deployment.pk, None)
    _settings_cache.pop(deployment.pk, None)
