"""Reward-hacking monitor: the counting and alarm rule, the stored counters and alarm through the
rewards endpoint (real Redis and database, the monitor's own background thread), and the health endpoint."""

from __future__ import annotations

import time

import pytest

from inference.monitor import rules as monitor
from inference.monitor.rules import MonitorSettings, alarm_decide, step_tally, tally, window_rates


def test_tally_counts_false_successes_per_run_and_skips_unscored_items():
    counts = tally([0.9, 0.8, 0.2, None, 0.1], 0.5, env_success=[False, True, True, True, False], run="a1")
    assert counts["n"] == 4 and counts["ms"] == 2 and counts["e"] == 4
    assert counts["fs"] == 1 and counts["fm"] == 1 and counts["es"] == 2
    assert counts["r:a1:fs"] == 1 and counts["r:a1:e"] == 4
    assert sum(counts[f"h{i}"] for i in range(monitor.HIST_BINS)) == 4
    rates = window_rates(counts)
    assert rates["false_success_rate"] == pytest.approx(0.25) and rates["false_fail_rate"] == pytest.approx(0.25)
    assert monitor.runs_of(counts)["a1"]["false_success_rate"] == pytest.approx(0.25)


def test_without_env_success_only_the_drift_counters_move():
    counts = tally([0.9, 0.1], 0.5, run="a1")
    assert counts["n"] == 2 and "e" not in counts and "fs" not in counts
    assert window_rates(counts)["false_success_rate"] is None
    assert monitor.disagreements([0.9, 0.1], 0.5, None) == []


def test_step_tally_and_series():
    counts = step_tally([0.9, 0.1, 0.7], 0.5, [0, 0, 5000], [True, False, False])
    series = monitor.steps_series(counts)
    assert series["steps"] == [0, monitor.MAX_STEP]
    assert series["model_success_rate"] == [0.5, 1.0] and series["env_success_rate"] == [0.5, 0.0]


def test_alarm_needs_the_rate_above_threshold_for_the_hold_period_and_enough_frames():
    settings = MonitorSettings(false_success_threshold=0.3, hold_s=10, min_items=4)
    high = {"e": 10, "fs": 5, "n": 10}
    few = {"e": 3, "fs": 3, "n": 3}
    low = {"e": 10, "fs": 1, "n": 10}
    assert alarm_decide(few, settings, now=0, above_since=None) == monitor.AlarmDecision(None, False, 1.0)
    first = alarm_decide(high, settings, now=100, above_since=None)
    assert first.above_since == 100 and not first.raise_alarm
    assert not alarm_decide(high, settings, now=105, above_since=100).raise_alarm
    assert alarm_decide(high, settings, now=110, above_since=100).raise_alarm
    assert alarm_decide(low, settings, now=111, above_since=100).above_since is None  # dropped: starts over
    off = MonitorSettings(enabled=False, hold_s=0, min_items=1)
    assert not alarm_decide(high, off, now=0, above_since=None).raise_alarm
    with pytest.raises(ValueError):
        MonitorSettings(false_success_threshold=1.5)


@pytest.mark.django_db(transaction=True)
def test_served_batches_feed_counters_frames_and_raise_the_alarm_once(project, settings):
    from asgiref.sync import async_to_sync

    from inference.broker import dump_npy
    from inference.models import DeploymentMonitor, ServedFrame
    from inference.monitor.selectors import alarm_state, monitor_data
    from inference.monitor.services import ServedBatch, alarm_acknowledge, alarm_signal, monitor_flush, monitor_submit
    from inference.serving import deployment_config

    from .conftest import deploy, make_trained_model, random_images

    deployment = deploy(make_trained_model(project))
    DeploymentMonitor.objects.create(deployment=deployment, hold_s=1.0, min_items=4, false_success_threshold=0.3)
    config = async_to_sync(deployment_config)(deployment.name)
    received = []
    alarm_signal.connect(lambda **kw: received.append(kw), weak=False, dispatch_uid="test-monitor")
    start = monitor.bucket_of(time.time()) - 60.0  # all in one 10 s bucket
    try:
        payload = dump_npy(random_images(4))
        # an honest start: agreement on every frame, no alarm
        for t in range(3):
            monitor_submit(
                ServedBatch(
                    config, payload, [0.9, 0.1, 0.2, 0.8], [True, False, False, True], ["e1"] * 4, "a1", start + t
                )
            )
        monitor_flush()
        assert not alarm_state(deployment)["alarm"] and ServedFrame.objects.count() == 0
        # then the model says success where the env says no, for longer than the hold period
        for t in range(3, 8):
            monitor_submit(
                ServedBatch(
                    config,
                    payload,
                    [0.9, 0.9, 0.9, 0.1],
                    [False, False, False, False],
                    ["e2"] * 4,
                    "a1/w0",
                    start + t * 1.1,
                )
            )
        monitor_flush()
    finally:
        alarm_signal.disconnect(dispatch_uid="test-monitor")
    row = DeploymentMonitor.objects.get(deployment=deployment)
    assert row.alarm_active and row.alarm_run == "a1/w0" and (row.alarm_rate or 0.0) > 0.3
    assert len(received) == 1 and received[0]["deployment"] == deployment.name
    frames = ServedFrame.objects.filter(deployment=deployment)
    assert frames.count() == 10  # at most FRAMES_PER_BUCKET per 10 s bucket
    queued = frames.filter(queued=True)
    assert queued.count() == 10 and set(queued.values_list("env_success", "success").distinct()) == {(False, True)}
    assert set(frames.values_list("episode_ref", flat=True)) == {"e2"}
    assert sorted(s or 0 for s in frames.values_list("episode_step", flat=True))[:3] == [0, 1, 2]

    data = monitor_data(deployment, hours=48)
    assert data["series"]["runs"]["a1"]["false_success_rate"] == 0.0
    assert data["series"]["runs"]["a1/w0"]["false_success_rate"] == pytest.approx(15 / 20)
    assert sum(data["series"]["served_histogram"]) == 32
    assert data["steps"]["steps"][:2] == [0, 1]

    alarm_acknowledge(deployment=deployment)
    assert not DeploymentMonitor.objects.get(deployment=deployment).alarm_active


@pytest.mark.django_db(transaction=True)
def test_a_breach_raises_the_alarm_after_its_hold_period_even_when_traffic_stops(project):
    """The rollout may end before the hold period: a timed check still decides (no batch after the breach)."""
    from asgiref.sync import async_to_sync

    from inference.broker import dump_npy
    from inference.models import DeploymentMonitor
    from inference.monitor.services import ServedBatch, monitor_flush, monitor_submit
    from inference.serving import deployment_config

    from .conftest import deploy, make_trained_model, random_images

    deployment = deploy(make_trained_model(project))
    DeploymentMonitor.objects.create(deployment=deployment, hold_s=1.0, min_items=4, false_success_threshold=0.3)
    config, payload, now = async_to_sync(deployment_config)(deployment.name), dump_npy(random_images(4)), time.time()
    for t in range(3):  # all within the hold period, then silence
        batch = ServedBatch(config, payload, [0.9] * 4, [False] * 4, ["e1"] * 4, "a1", now + 0.1 * t)
        monitor_submit(batch)
    monitor_flush()
    assert not DeploymentMonitor.objects.get(deployment=deployment).alarm_active
    deadline = time.monotonic() + 5.0
    while not DeploymentMonitor.objects.get(deployment=deployment).alarm_active and time.monotonic() < deadline:
        time.sleep(0.1)
    row = DeploymentMonitor.objects.get(deployment=deployment)
    assert row.alarm_active and row.alarm_rate == pytest.approx(1.0) and row.alarm_run == "a1"


@pytest.mark.django_db(transaction=True)
def test_the_alarm_frames_join_the_head_of_the_labeling_queue_one_label_from_training_data(project, user):
    """The disagreeing frames become steps of a monitor episode in the project, pinned at the head of its
    queue with the alarm's reason; a recompute keeps them first; labeling one moves "Label next" on."""
    from asgiref.sync import async_to_sync

    from inference.broker import dump_npy
    from inference.models import DeploymentMonitor
    from inference.monitor.alarm_queue import ALARM_REASON
    from inference.monitor.services import ServedBatch, monitor_flush, monitor_submit
    from inference.serving import deployment_config
    from labeling.labels.services import Actor, frame_labels_set
    from labeling.models import Episode, FrameLabel
    from tests.training.conftest import seed_episodes
    from training.models import LabelQueueItem
    from training.queue.services import label_queue_items, label_queue_next, label_queue_recompute

    from .conftest import deploy, make_trained_model, random_images

    (older,) = seed_episodes(project, episodes=1, steps=4, windows=False)
    FrameLabel.objects.filter(episode=older).delete()  # an unlabeled episode already in the queue
    LabelQueueItem.objects.create(project=project, step=older.steps.get(index=1), rank=0, score=0.5, probability=0.5)
    deployment = deploy(make_trained_model(project))
    DeploymentMonitor.objects.create(deployment=deployment, hold_s=1.0, min_items=4, false_success_threshold=0.3)
    config, payload, start = async_to_sync(deployment_config)(deployment.name), dump_npy(random_images(4)), time.time()
    for t in range(4):
        batch = ServedBatch(config, payload, [0.9, 0.8, 0.95, 0.1], [False] * 4, ["hover"] * 4, "a1", start + 0.5 * t)
        monitor_submit(batch)
    monitor_flush()
    deadline = time.monotonic() + 5.0
    while not LabelQueueItem.objects.filter(pinned=True).exists() and time.monotonic() < deadline:
        time.sleep(0.1)

    (episode,) = Episode.objects.filter(project=project, metadata__monitor=deployment.name)
    assert episode.status == Episode.Status.FINISHED and episode.success is False
    queued = list(label_queue_items(project=project))
    alarm_items = [item for item in queued if item.pinned]
    assert 0 < len(alarm_items) <= 10 and queued[: len(alarm_items)] == alarm_items  # the head of the queue
    assert {item.step.episode_id for item in alarm_items} == {episode.pk}
    assert all(item.reasons[0] == ALARM_REASON and item.probability > 0.5 for item in alarm_items)
    assert all(item.step.env_success is False for item in alarm_items)
    assert queued[len(alarm_items)].step.episode_id == older.pk  # what was queued before moved down

    label_queue_recompute(project=project)  # a retrain's recompute ranks the rest after them
    again = list(label_queue_items(project=project, limit=500))
    assert [i.step_id for i in again[: len(alarm_items)]] == [i.step_id for i in alarm_items]
    assert len(again) > len(alarm_items) and not any(i.pinned for i in again[len(alarm_items) :])

    first = label_queue_next(project=project)
    assert first is not None
    frame_labels_set(episode=episode, items=[(first.step.index, "fail")], actor=Actor.of(user))
    assert FrameLabel.objects.filter(step=first.step, source="human", value="fail").exists()  # training data now
    following = label_queue_next(project=project)
    assert following is not None and following.step_id == alarm_items[1].step_id
    settle_monitor()


def settle_monitor(timeout: float = 10.0) -> None:
    """Let the monitor's timed re-checks run before the test's tables are flushed (no stray queries then)."""
    from inference.monitor import services as monitor_store

    deadline = time.monotonic() + timeout
    while monitor_store._recheck_pending and time.monotonic() < deadline:
        time.sleep(0.1)
    monitor_store.monitor_flush()


@pytest.mark.django_db(transaction=True)
def test_batches_without_env_flags_are_counted_together_and_none_is_lost(project):
    from asgiref.sync import async_to_sync

    from inference.broker import dump_npy
    from inference.monitor.services import ServedBatch, _groups, monitor_flush, monitor_submit, ref_of, window_counts
    from inference.serving import deployment_config

    from .conftest import deploy, make_trained_model, random_images

    deployment = deploy(make_trained_model(project))
    config, payload, now = async_to_sync(deployment_config)(deployment.name), dump_npy(random_images(2)), time.time()
    plain = [ServedBatch(config, payload, [0.9, 0.1], None, None, f"a{i % 2}", now) for i in range(6)]
    flagged = ServedBatch(config, payload, [0.9, 0.1], [True, False], None, "a0", now)
    # runs of plain batches are recorded together; a batch with env flags alone, in its place
    assert [len(g) for g in _groups([*plain[:3], flagged, *plain[3:]])] == [3, 1, 3]
    for batch in plain:
        assert monitor_submit(batch)
    monitor_flush()
    counts = window_counts(ref_of(config.name, config.id), now=time.time(), window_s=60)
    assert counts["n"] == 12 and counts["ms"] == 6  # every item of the six batches, counted once


def test_off_distribution_frames_are_counted_per_deployment_over_time(project):
    """Served items flagged `ood` (and those checked at all) are counted per bucket: the monitor shows how many
    were flagged and at what rate, per point and over the period; frames of a model without OOD statistics
    (flag None) count as not checked."""
    from asgiref.sync import async_to_sync

    from inference.broker import dump_npy
    from inference.monitor.selectors import time_series
    from inference.monitor.services import ServedBatch, monitor_flush, monitor_submit, ood_counts, ref_of
    from inference.serving import deployment_config

    from .conftest import deploy, make_trained_model, random_images

    assert ood_counts([True, False, None, True]) == {"oodn": 3, "ood": 2}
    assert ood_counts(None) == {} and ood_counts([None, None]) == {}
    deployment = deploy(make_trained_model(project))
    config, payload = async_to_sync(deployment_config)(deployment.name), dump_npy(random_images(4))
    now = time.time()
    batches = [  # an earlier point: 1 of 4 flagged; then a covered camera: 4 of 4; then a model that checks none
        ServedBatch(config, payload, [0.9] * 4, None, None, "a1", now - 600, [True, False, False, False]),
        ServedBatch(config, payload, [0.9] * 4, None, None, "a1", now, [True] * 4),
        ServedBatch(config, payload, [0.9] * 4, None, None, "a1", now, None),
    ]
    for batch in batches:
        assert monitor_submit(batch)
    monitor_flush()
    series = time_series(ref_of(config.name, config.id), hours=1)
    assert (series["ood_total"], series["ood_checked"]) == (5, 8)
    assert series["ood_frames"] == [1, 4] and series["ood_rate"] == [0.25, 1.0]
    assert series["frames"] == [4, 8]  # the unchecked frames still count as served
