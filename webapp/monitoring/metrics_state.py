"""Scrape-time gauges read from the database and Redis (the same for every web process): queue depths,
training jobs and dataset snapshots by state, deployment health, inference workers alive."""

from __future__ import annotations

from prometheus_client.core import GaugeMetricFamily

from webapp.monitoring import health


class StateCollector:
    """A prometheus-client collector; registered on a per-scrape registry by the /metrics view."""

    def collect(self):
        from django.db.models import Count

        from common.jobs.models import JobStatus
        from training.models import DatasetSnapshot, TrainingJob

        redis = health._redis()
        deployments = health.deployment_states()
        up = GaugeMetricFamily(
            "rs_deployment_healthy", "1 unless the deployment is marked unhealthy.", labels=["deployment"]
        )
        for d in deployments:
            up.add_metric([d["name"]], 1.0 if d["ok"] else 0.0)
        yield up

        jobs = GaugeMetricFamily("rs_training_jobs", "Training jobs by state.", labels=["kind", "state"])
        counts = {(k, s): n for k, s, n in TrainingJob.objects.values_list("kind", "status").annotate(n=Count("id"))}
        for kind in {k for k, _ in counts} | {"resnet"}:
            for state in JobStatus.values:
                jobs.add_metric([kind, state], float(counts.get((kind, state), 0)))
        yield jobs

        snapshots = GaugeMetricFamily("rs_dataset_snapshots", "Dataset snapshots by state.", labels=["state"])
        snap_counts = dict(DatasetSnapshot.objects.values_list("status").annotate(n=Count("id")))
        for state in DatasetSnapshot.Status.values:
            snapshots.add_metric([state], float(snap_counts.get(state, 0)))
        yield snapshots

        depth = GaugeMetricFamily("rs_queue_depth", "Messages waiting, by queue.", labels=["queue"])
        workers = GaugeMetricFamily("rs_inference_workers_alive", "Inference workers with a fresh heartbeat.")
        try:
            for name, n in health.queue_depths(redis, [d["name"] for d in deployments]).items():
                depth.add_metric([name], float(n))
            workers.add_metric([], float(len(health.alive_workers(redis))))
        except Exception:  # Redis down: the gauges are absent and rs_redis_up says why
            redis_up = 0.0
        else:
            redis_up = 1.0
        yield depth
        yield workers
        r = GaugeMetricFamily("rs_redis_up", "1 when Redis answered this scrape.")
        r.add_metric([], redis_up)
        yield r
