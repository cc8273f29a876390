"""The job kit: one lifecycle for every kind of background job (training jobs, snapshot builds, imports,
proposal generations).

- `models.Job`: the abstract row each kind's model inherits (status, attempt, progress, heartbeat, error,
  timestamps), with the shared `JobStatus` values and the `Lifecycle` that names a kind's own values.
- `services`: the only writes that move a job: `job_claim` (a run starts), `job_progress` (progress and
  heartbeat), `job_finish` (succeeded, failed or cancelled), `JobHeartbeat` (a thread keeps a run alive) and
  `jobs_recover_stale` (the sweep: a run lost with its worker is requeued, or failed once out of attempts).
- `payload` and `api`: a job's progress as every page and API shows it.

It imports no app: a kind describes itself to the sweep with a `JobKind` (its model, how to send its message).
"""
