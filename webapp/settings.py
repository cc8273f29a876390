"""Reward Studio settings. Every deploy-time value comes from an environment variable (docs/operations.md, "Settings")."""

from __future__ import annotations

import os
from datetime import timedelta
from pathlib import Path
from typing import Any

import dj_database_url

from common.filestore.config import storage_config
from common.redis_clients import channel_layer_host

from .env import (
    bound_to_loopback,
    env_bool,
    env_choice,
    env_cidrs,
    env_int,
    env_list,
    env_path,
    env_rate,
    env_str,
    secret_key,
)

BASE_DIR = Path(__file__).resolve().parent.parent
DATA_DIR = env_path("RS_DATA_DIR", BASE_DIR / "data")

# DEBUG is on by default only while the server listens on loopback (RS_HOST), i.e. on a developer's machine.
DEBUG = env_bool("DEBUG", bound_to_loopback())
SECRET_KEY = secret_key("SECRET_KEY", DATA_DIR / "secret_key.txt")
ALLOWED_HOSTS = env_list("ALLOWED_HOSTS", ["localhost", "127.0.0.1", "[::1]", "testserver"])
CSRF_TRUSTED_ORIGINS = env_list("CSRF_TRUSTED_ORIGINS", [])
# Networks whose requests reach deployments (rewards, chat, /health) without a token (common/trusted_networks.py).
TRUSTED_CIDRS = env_cidrs("TRUSTED_CIDRS", [])
# Reverse proxies whose X-Forwarded-For names the client (for TRUSTED_CIDRS and rate limits); none: the TCP peer.
FORWARDED_ALLOW_IPS = env_cidrs("FORWARDED_ALLOW_IPS", [])

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "rest_framework",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    "channels",
    "webapp",
    "projects",
    "labeling",
    "training",
    "inference",
    "inference.teleop",
    "axes",
    "webhooks",
]

MIDDLEWARE = [
    "webapp.monitoring.metrics_middleware.request_metrics",
    "django.middleware.security.SecurityMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "axes.middleware.AxesMiddleware",
]

ROOT_URLCONF = "webapp.urls"
ASGI_APPLICATION = "webapp.asgi.application"
WSGI_APPLICATION = None

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "webapp" / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
                "webapp.context_processors.processes_down",
            ],
        },
    },
]

# Database: DATABASE_URL (postgres://user@host:5432/name in production); an SQLite file by default.
DATABASES = {
    "default": dj_database_url.parse(
        env_str("DATABASE_URL", f"sqlite:///{DATA_DIR / 'reward_studio.sqlite3'}"),
        conn_max_age=env_int("DB_CONN_MAX_AGE", 0, minimum=0),
    )
}
if DATABASES["default"]["ENGINE"].endswith("sqlite3"):
    # Several processes (web, Celery workers) write the embedded database: WAL lets readers go on while one
    # writes, and IMMEDIATE transactions wait for the write lock instead of failing with "database is locked".
    DATABASES["default"].setdefault("OPTIONS", {}).update(
        timeout=30, transaction_mode="IMMEDIATE", init_command="PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;"
    )
elif DATABASES["default"]["ENGINE"].endswith("postgresql") and not env_bool("POSTGRES_JIT", False):
    # PostgreSQL compiles a query to machine code once its estimated cost passes jit_above_cost, which the
    # counts of a project with a million frames do: 300+ ms of compiling for 20 ms of work per page.
    options = DATABASES["default"].setdefault("OPTIONS", {})
    options["options"] = f"{options.get('options', '')} -c jit=off".strip()
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

REDIS_URL = env_str("REDIS_URL", "redis://127.0.0.1:6379/0")

# Files (frames, exports, checkpoints) go through Django's storage API: `local` keeps them under MEDIA_ROOT,
# `s3` on an S3-compatible object store (django-storages), any other value names a storage class. Workers
# without the web's disk fetch what they read into a bounded local cache and publish what they write
# (common/filestore/, docs/operations.md, "Scaling out").
STORAGE_BACKEND = env_str("STORAGE_BACKEND", "local")
S3_BUCKET = env_str("S3_BUCKET", "")
S3_ENDPOINT_URL = env_str("S3_ENDPOINT_URL", "")
S3_ACCESS_KEY_ID = env_str("S3_ACCESS_KEY_ID", "")
S3_SECRET_ACCESS_KEY = env_str("S3_SECRET_ACCESS_KEY", "")
S3_REGION = env_str("S3_REGION", "us-east-1")
S3_ADDRESSING_STYLE = env_choice("S3_ADDRESSING_STYLE", "path", ("path", "virtual", "auto"))
STORAGE_CACHE_DIR = env_path("STORAGE_CACHE_DIR", DATA_DIR / "cache")
STORAGE_CACHE_MAX_MB = env_int("STORAGE_CACHE_MAX_MB", 10240, minimum=1)
MEDIA_ROOT = env_path("MEDIA_ROOT", DATA_DIR / "media")
MEDIA_URL = "/media/"
# Stored files are served by a permission-checked view (webapp.views.media). Behind nginx, set this to an
# `internal` location aliased to MEDIA_ROOT (e.g. /protected-media/) and the view answers with
# X-Accel-Redirect instead of streaming the file itself. Empty: Django streams it.
MEDIA_ACCEL_REDIRECT = env_str("MEDIA_ACCEL_REDIRECT", "")
STATIC_ROOT = env_path("STATIC_ROOT", BASE_DIR / "staticfiles")
STATIC_URL = "/static/"
STATICFILES_DIRS = [BASE_DIR / "frontend" / "dist"]
STORAGES = {
    "default": storage_config(
        STORAGE_BACKEND,
        bucket=S3_BUCKET,
        endpoint_url=S3_ENDPOINT_URL,
        access_key=S3_ACCESS_KEY_ID,
        secret_key=S3_SECRET_ACCESS_KEY,
        region=S3_REGION,
        addressing_style=S3_ADDRESSING_STYLE,
    ),
    "staticfiles": {"BACKEND": "whitenoise.storage.CompressedStaticFilesStorage"},
}
FILE_UPLOAD_MAX_MEMORY_SIZE = 64 * 1024 * 1024
DATA_UPLOAD_MAX_MEMORY_SIZE = env_int("DATA_UPLOAD_MAX_MEMORY_SIZE", 256 * 1024 * 1024, minimum=1024)
DATA_UPLOAD_MAX_NUMBER_FILES = 10_000

# Image guard rails for ingest (Pillow decompression-bomb limit follows the same bound).
MAX_IMAGE_SIDE = env_int("MAX_IMAGE_SIDE", 2048, minimum=16)
MAX_IMAGE_PIXELS = env_int("MAX_IMAGE_PIXELS", 2048 * 2048, minimum=256)
# Request bounds (docs/operations.md, "Limits and production settings"): decoded pixels of one request, JSON body size,
# concurrent decoding per process, and what one imported pickle may allocate.
MAX_REQUEST_PIXELS = env_int("MAX_REQUEST_PIXELS", 1024 * 224 * 224, minimum=256)
MAX_JSON_BODY_BYTES = env_int("MAX_JSON_BODY_BYTES", 64 * 1024 * 1024, minimum=1024)
# Any other request body that reaches Django (import uploads, multipart chunks): 413 at once past this.
MAX_REQUEST_BODY_BYTES = env_int("MAX_REQUEST_BODY_BYTES", 4 * 1024 * 1024 * 1024, minimum=1024 * 1024)
# A JSON step chunk (base64 images inline): 413 at once past this; larger chunks go binary or multipart.
INGEST_JSON_CHUNK_MAX_BYTES = env_int("INGEST_JSON_CHUNK_MAX_BYTES", 16 * 1024 * 1024, minimum=64 * 1024)
# A body sent with neither a token nor a session cookie (the login form): 401 at once past this, unread.
ANONYMOUS_BODY_MAX_BYTES = env_int("ANONYMOUS_BODY_MAX_BYTES", 64 * 1024, minimum=4096)
INGEST_MAX_STEPS_PER_CHUNK = env_int("INGEST_MAX_STEPS_PER_CHUNK", 1000, minimum=1)
INGEST_MAX_IMAGES_PER_CHUNK = env_int("INGEST_MAX_IMAGES_PER_CHUNK", 1024, minimum=1)
# Ingest transactions on PostgreSQL commit without waiting for the WAL flush unless this is on
# (labeling.ingest.services._ingest_commit_mode; docs/operations.md, "Limits and production settings").
INGEST_SYNCHRONOUS_COMMIT = env_bool("INGEST_SYNCHRONOUS_COMMIT", False)
# Threads of a web process that store binary step chunks (labeling.ingest.fastpath); SQLite takes one
# writer at a time, so one thread there.
INGEST_WRITER_THREADS = env_int(
    "INGEST_WRITER_THREADS", 1 if DATABASES["default"]["ENGINE"].endswith("sqlite3") else 4, minimum=1
)
DECODE_CONCURRENCY = env_int("DECODE_CONCURRENCY", 2, minimum=1)
# Pixels a background task (label-queue recompute, model evaluation, a snapshot's frame cache) holds
# decoded at once, at the size it uses them (common.images.budget.FrameBatches); one full-size frame is
# decoded at a time on top of it.
BACKGROUND_DECODE_PIXELS = env_int("BACKGROUND_DECODE_PIXELS", 16 * 1024 * 1024, minimum=256)
# Memory a background task that decodes images or runs models may grow its process by (MiB; the label-queue
# recompute checks it after each batch and fails with the reason beyond it). Workers also hand freed memory
# back to the OS: common.memory (allocator settings at start, malloc_trim after each task).
TASK_MEMORY_BUDGET_MB = env_int("TASK_MEMORY_BUDGET_MB", 1024, minimum=64)
# Allocations at least this large get their own mapping, returned to the OS when freed (glibc's
# M_MMAP_THRESHOLD; 0 leaves glibc's sliding default, which keeps freed decode buffers in the heap).
MALLOC_MMAP_THRESHOLD_BYTES = env_int("MALLOC_MMAP_THRESHOLD_BYTES", 1024 * 1024, minimum=0)
# Percent of the labeling queue picked for coverage (frames unlike any labeled one) rather than value.
LABEL_QUEUE_EXPLORE_PERCENT = min(100, env_int("LABEL_QUEUE_EXPLORE_PERCENT", 50, minimum=0))
DECODE_WAIT_SECONDS = env_int("DECODE_WAIT_SECONDS", 30, minimum=1)
PICKLE_MAX_ARRAY_BYTES = env_int("PICKLE_MAX_ARRAY_BYTES", 512 * 1024 * 1024, minimum=1024)
PICKLE_MAX_TOTAL_BYTES = env_int("PICKLE_MAX_TOTAL_BYTES", 2 * 1024 * 1024 * 1024, minimum=1024)
PICKLE_MAX_VALUES = env_int("PICKLE_MAX_VALUES", 2_000_000, minimum=100)
IMPORT_DIR = env_path("IMPORT_DIR", DATA_DIR / "imports")
IMPORT_TIME_LIMIT_SECONDS = env_int("IMPORT_TIME_LIMIT_SECONDS", 3600, minimum=10)
# Project-wide proposal generation (a Celery task): the longest one may run.
PROPOSALS_TIME_LIMIT_SECONDS = env_int("PROPOSALS_TIME_LIMIT_SECONDS", 1800, minimum=10)
IMPORT_MAX_MEMORY_BYTES = env_int("IMPORT_MAX_MEMORY_BYTES", 8 * 1024 * 1024 * 1024, minimum=64 * 1024 * 1024)
# Video and LeRobot imports (labeling/imports/lerobot/importer.py): frames decoded from one video (one camera of one
# episode), episodes of one dataset; frames of one LeRobot export (labeling/imports/lerobot/export.py).
VIDEO_MAX_FRAMES = env_int("VIDEO_MAX_FRAMES", 20_000, minimum=1)
LEROBOT_MAX_EPISODES = env_int("LEROBOT_MAX_EPISODES", 10_000, minimum=1)
LEROBOT_EXPORT_MAX_FRAMES = env_int("LEROBOT_EXPORT_MAX_FRAMES", 20_000, minimum=1)

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = False
USE_TZ = True

LOGIN_URL = "/accounts/login/"
# Object permissions (project roles, agent scopes) are `rules` predicates: projects/access.py.
AUTHENTICATION_BACKENDS = [
    "rules.permissions.ObjectPermissionBackend",
    "django.contrib.auth.backends.ModelBackend",
]
LOGIN_REDIRECT_URL = "/"
LOGOUT_REDIRECT_URL = "/accounts/login/"

REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "projects.auth.AgentTokenAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "EXCEPTION_HANDLER": "common.errors.exception_handler",
    "DEFAULT_THROTTLE_CLASSES": ["projects.gate.throttles.ApiRateThrottle"],
    "DEFAULT_PARSER_CLASSES": [
        "common.parsers.BoundedJSONParser",
        "rest_framework.parsers.FormParser",
        "rest_framework.parsers.MultiPartParser",
    ],
}
SPECTACULAR_SETTINGS = {
    "TITLE": "Reward Studio API",
    "DESCRIPTION": "Ingest robot episodes, label them, train reward models and serve rewards.",
    "VERSION": "0.1.0",
    "SERVE_PERMISSIONS": ["rest_framework.permissions.IsAuthenticated"],
    # Swagger UI and Redoc come from drf-spectacular-sidecar's static files: the docs work air-gapped.
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
}


# Channels on Redis.
CHANNEL_LAYERS: dict[str, Any] = {
    "default": {
        "BACKEND": "channels_redis.core.RedisChannelLayer",
        "CONFIG": {"hosts": [REDIS_URL], "capacity": 1000, "expiry": 30},
    }
}

# Celery on Redis; queues by purpose so workers on other machines can take just one kind of work.
CELERY_QUEUE_INGEST = "ingest"
CELERY_QUEUE_TRAINING = "training"
CELERY_QUEUE_INFERENCE = "inference"
CELERY_QUEUE_DEFAULT = "default"
CELERY_BROKER_URL = env_str("CELERY_BROKER_URL", REDIS_URL)
CELERY_RESULT_BACKEND = env_str("CELERY_RESULT_BACKEND", REDIS_URL)
CELERY_TASK_DEFAULT_QUEUE = CELERY_QUEUE_DEFAULT
# Every task is routed by name (tests/webapp/test_celery_routes.py pins them); beat's schedule is in webapp/celery.py.
CELERY_TASK_ROUTES = {
    "labeling.tasks.generate_episode_proposals": {"queue": CELERY_QUEUE_INGEST},
    "training.tasks.run_training_job": {"queue": CELERY_QUEUE_TRAINING},
    "training.tasks.build_snapshot": {"queue": CELERY_QUEUE_DEFAULT},
    "webapp.sweep_stale_jobs": {"queue": CELERY_QUEUE_DEFAULT},
    "labeling.tasks.sweep_orphan_frames": {"queue": CELERY_QUEUE_DEFAULT},
    "labeling.tasks.run_import_job": {"queue": CELERY_QUEUE_INGEST},
    "labeling.tasks.generate_project_proposals": {"queue": CELERY_QUEUE_INGEST},
    "labeling.tasks.run_lerobot_export": {"queue": CELERY_QUEUE_INGEST},
    "webhooks.tasks.deliver_webhook": {"queue": CELERY_QUEUE_DEFAULT},
    "training.tasks.recompute_label_queue": {"queue": CELERY_QUEUE_DEFAULT},
    "training.tasks.after_training_job": {"queue": CELERY_QUEUE_DEFAULT},
    "training.tasks.compute_evaluation": {"queue": CELERY_QUEUE_DEFAULT},
    "training.tasks.retrain_sweep": {"queue": CELERY_QUEUE_DEFAULT},
    "webapp.heartbeat": {"queue": CELERY_QUEUE_DEFAULT},
}
CELERY_TASK_SERIALIZER = "json"
CELERY_RESULT_SERIALIZER = "json"
CELERY_ACCEPT_CONTENT = ["json"]
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_TASK_ACKS_LATE = True
CELERY_TASK_REJECT_ON_WORKER_LOST = False
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True

# The demo project's rendered ManiSkill episodes (made once, read on later starts).
DEMO_CACHE_DIR = env_path("DEMO_CACHE_DIR", Path.home() / ".cache" / "reward-studio" / "demo")

# Where the run command serves (used by commands that print follow-up URLs).
RS_HOST = env_str("RS_HOST", "127.0.0.1")
RS_PORT = env_int("RS_PORT", 8000, minimum=1)

# Monitoring: each inference worker serves Prometheus metrics on its own port (0: off); web processes
# at /metrics, open to anyone who can reach it unless METRICS_TOKEN is set (then `Bearer <token>`).
INFERENCE_METRICS_PORT = env_int("INFERENCE_METRICS_PORT", 9101, minimum=0)
INFERENCE_METRICS_HOST = env_str("INFERENCE_METRICS_HOST", "127.0.0.1")
METRICS_TOKEN = env_str("METRICS_TOKEN", "")
# Celery workers and beat stamp a heartbeat in Redis this often; /healthz reads a process as down after 3 missed.
HEARTBEAT_SECONDS = env_int("HEARTBEAT_SECONDS", 10, minimum=1)
# The "process down" banner on every page reads Redis at most this often per web process.
HEALTH_BANNER_CACHE_SECONDS = env_int("HEALTH_BANNER_CACHE_SECONDS", 5, minimum=0)

# Training jobs survive their workers: resume checkpoints, heartbeats, requeue with bounded attempts.
TRAINING_CHECKPOINT_SECONDS = env_int("TRAINING_CHECKPOINT_SECONDS", 300, minimum=0)
TRAINING_HEARTBEAT_SECONDS = env_int("TRAINING_HEARTBEAT_SECONDS", 20, minimum=1)
TRAINING_STALE_AFTER_SECONDS = env_int("TRAINING_STALE_AFTER_SECONDS", 120, minimum=2)
TRAINING_MAX_ATTEMPTS = env_int("TRAINING_MAX_ATTEMPTS", 3, minimum=1)
TRAINING_SWEEP_SECONDS = env_int("TRAINING_SWEEP_SECONDS", 60, minimum=1)
# Snapshot builds survive their workers too: a build silent this long is requeued, at most this many builds.
SNAPSHOT_STALE_AFTER_SECONDS = env_int("SNAPSHOT_STALE_AFTER_SECONDS", 300, minimum=2)
SNAPSHOT_MAX_ATTEMPTS = env_int("SNAPSHOT_MAX_ATTEMPTS", 3, minimum=1)
# Disk a project's snapshots may take together (bytes; 0: no quota): a build that would go over it (its frames
# at their stored size, counted before anything is written) fails with the reason.
SNAPSHOT_PROJECT_QUOTA_BYTES = env_int("SNAPSHOT_PROJECT_QUOTA_BYTES", 20 * 1024**3, minimum=0)
# Import and proposal jobs: a running job keeps a heartbeat; one silent this long is requeued (at most
# JOBS_MAX_ATTEMPTS runs), then failed with the reason.
JOBS_HEARTBEAT_SECONDS = env_int("JOBS_HEARTBEAT_SECONDS", 20, minimum=1)
JOBS_STALE_AFTER_SECONDS = env_int("JOBS_STALE_AFTER_SECONDS", 180, minimum=2)
JOBS_MAX_ATTEMPTS = env_int("JOBS_MAX_ATTEMPTS", 3, minimum=1)
# Frame files no row names (a web process killed mid-chunk) are removed once this old, by a sweep this often.
ORPHAN_FRAMES_GRACE_SECONDS = env_int("ORPHAN_FRAMES_GRACE_SECONDS", 3600, minimum=60)
ORPHAN_FRAMES_SWEEP_SECONDS = env_int("ORPHAN_FRAMES_SWEEP_SECONDS", 3600, minimum=10)
# Training jobs within the machine: processes per node at most this (0: the host's GPUs, one without any);
# a multi-node job whose nodes have not all joined this long after it started fails with the reason.
TRAINING_MAX_PROCESSES = env_int("TRAINING_MAX_PROCESSES", 0, minimum=0)
# The training worker's host, checked when a job is submitted: `num_threads` at most its CPU cores (default:
# the cores where this process runs; set it where the training worker runs on another machine), and the
# job's first batch (batch_size x 3 x H x W float32 input, a lower bound of what a step holds) at most
# TRAINING_MAX_BATCH_BYTES.
TRAINING_HOST_CPUS = env_int("TRAINING_HOST_CPUS", os.cpu_count() or 1, minimum=1)
TRAINING_MAX_BATCH_BYTES = env_int("TRAINING_MAX_BATCH_BYTES", 4 * 1024**3, minimum=1024 * 1024)
# Off where the web process has no copy of the training workers' MODEL_DIR (docs/operations.md, "Scaling out"): a job's
# pretrained_path / base_model_path is then checked for existence by the worker that runs it, not at submission.
TRAINING_MODELS_ON_WEB = env_bool("TRAINING_MODELS_ON_WEB", True)
TRAINING_RENDEZVOUS_TIMEOUT_SECONDS = env_int("TRAINING_RENDEZVOUS_TIMEOUT_SECONDS", 300, minimum=5)

# Where model weights may be read from (pretrained backbones, VLM base folders): local paths only.
MODEL_DIR = env_path("MODEL_DIR", DATA_DIR / "models")

# celery beat keeps its schedule in the data folder (the Procfile and the systemd unit pass no --schedule).
CELERY_BEAT_SCHEDULE_FILENAME = str(DATA_DIR / "celerybeat-schedule")

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "filters": {"redact_tokens": {"()": "webapp.security.log_filters.RedactTokens"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "filters": ["redact_tokens"]}},
    "root": {"handlers": ["console"], "level": env_str("LOG_LEVEL", "INFO")},
    # uvicorn's own access and error lines (request paths with their query strings)
    "loggers": {name: {"filters": ["redact_tokens"]} for name in ("uvicorn.access", "uvicorn.error")},
}

# Static files: WhiteNoise serves frontend/dist straight from the finders (no collectstatic needed locally).
WHITENOISE_USE_FINDERS = True
WHITENOISE_AUTOREFRESH = DEBUG
WHITENOISE_ROOT = BASE_DIR / "webapp" / "root"  # files served at the site's root: /favicon.ico, /favicon.svg

# ---- Hardening: limits, Redis bounds, production defaults (docs/operations.md, "Limits and production settings") ----
API_RATE_LIMIT = env_rate("API_RATE_LIMIT", "100/second")
REWARDS_RATE_LIMIT = env_rate("REWARDS_RATE_LIMIT", "300/second")
BAD_REQUEST_RATE_LIMIT = env_rate("BAD_REQUEST_RATE_LIMIT", "30/10 seconds")
INFERENCE_QUEUE_MAX = env_int("INFERENCE_QUEUE_MAX", 4096, minimum=1)
INFERENCE_QUEUE_TTL_S = env_int("INFERENCE_QUEUE_TTL_S", 120, minimum=1)
INFERENCE_CLIENT_QUEUE_MAX = env_int("INFERENCE_CLIENT_QUEUE_MAX", 250, minimum=1)
# Bytes, not only counts: payload bytes waiting per deployment and per client, and pixels per worker batch.
INFERENCE_QUEUE_MAX_BYTES = env_int("INFERENCE_QUEUE_MAX_BYTES", 512 * 1024 * 1024, minimum=1024 * 1024)
INFERENCE_CLIENT_QUEUE_MAX_BYTES = env_int("INFERENCE_CLIENT_QUEUE_MAX_BYTES", 256 * 1024 * 1024, minimum=1024 * 1024)
# payload bytes waiting in every inference queue together, and one project's (docs/operations.md, "Limits and production settings")
INFERENCE_INFLIGHT_MAX_BYTES = env_int("INFERENCE_INFLIGHT_MAX_BYTES", 384 * 1024 * 1024, minimum=1024 * 1024)
# reward bodies one web process holds at once (common/body_budget.py); more: 503 with Retry-After
WEB_BODIES_MAX_BYTES = env_int("WEB_BODIES_MAX_BYTES", 384 * 1024 * 1024, minimum=1024 * 1024)
INFERENCE_PROJECT_INFLIGHT_MAX_BYTES = env_int(
    "INFERENCE_PROJECT_INFLIGHT_MAX_BYTES", 192 * 1024 * 1024, minimum=1024 * 1024
)
INFERENCE_BATCH_MAX_PIXELS = env_int("INFERENCE_BATCH_MAX_PIXELS", 16 * 1024 * 1024, minimum=224 * 224)
# Same-host frames (inference/shm/frames.py): a client on this machine may name its shared-memory segment.
SHM_ENABLED = env_bool("SHM_ENABLED", True)
# Benches only: an inference worker started with it serves the instant model (training/instant), never offered to users.
BENCH_MODELS = env_bool("BENCH_MODELS", False)
VLM_CLIENT_BUFFER_MAX_BYTES = env_int("VLM_CLIENT_BUFFER_MAX_BYTES", 512 * 1024 * 1024, minimum=1024 * 1024)
VLM_STREAM_TTL_S = env_int("VLM_STREAM_TTL_S", 600, minimum=1)
# all VLM step buffers together, and one project's (docs/operations.md, "Limits and production settings"): well under Redis' maxmemory
VLM_BUFFERS_MAX_BYTES = env_int("VLM_BUFFERS_MAX_BYTES", 384 * 1024 * 1024, minimum=1024 * 1024)
VLM_PROJECT_BUFFERS_MAX_BYTES = env_int("VLM_PROJECT_BUFFERS_MAX_BYTES", 128 * 1024 * 1024, minimum=1024 * 1024)
VLM_MAX_STREAMS = env_int("VLM_MAX_STREAMS", 256, minimum=1)
TELEOP_TOKEN_CHECK_S = env_int("TELEOP_TOKEN_CHECK_S", 2, minimum=1)
# RL-run scale (docs/operations.md, "RL runs at scale"). Each web process's request-path Redis pools (inference broker,
# payload writer, rate limits, channel layer) open at most REDIS_MAX_CONNECTIONS connections each; a request
# waits up to REDIS_POOL_TIMEOUT_S for a free one (then a 503), never "Too many connections".
REDIS_MAX_CONNECTIONS = env_int("REDIS_MAX_CONNECTIONS", 2048, minimum=16)
REDIS_POOL_TIMEOUT_S = env_int("REDIS_POOL_TIMEOUT_S", 20, minimum=1)
# Tokenless callers from TRUSTED_CIDRS are counted per address (not all as one client), with limits sized for
# a batch of RL envs: TRUSTED_RATE_LIMIT replaces API_RATE_LIMIT and REWARDS_RATE_LIMIT for them, and
# TRUSTED_CLIENT_QUEUE_MAX replaces INFERENCE_CLIENT_QUEUE_MAX.
TRUSTED_RATE_LIMIT = env_rate("TRUSTED_RATE_LIMIT", "5000/second")
TRUSTED_CLIENT_QUEUE_MAX = env_int("TRUSTED_CLIENT_QUEUE_MAX", 2048, minimum=1)
# A model loading on demand: requests sent before it was ready wait INFERENCE_TIMEOUT_S from when it is
# ready, at most this many seconds past their own timeout in all.
INFERENCE_LOAD_WAIT_S = env_int("INFERENCE_LOAD_WAIT_S", 600, minimum=0)
# How long a reward, VLM or chat request waits for its answer (queue and forward). An RL run's whole batch
# arrives at once (RLinf: one request per env), so the last of 1,024 chat windows waits for the 1,023 before it.
INFERENCE_TIMEOUT_S = env_int("INFERENCE_TIMEOUT_S", 120, minimum=1)
# Where the JPEG/PNG frames of a JSON reward request to a ResNet deployment are decoded: "web" (the web
# process decodes them, the worker gets pixels) or "worker" (the web checks their headers only and forwards the
# compressed bytes; the inference worker decodes them on its device, JPEGs on the GPU with nvJPEG). "worker" is
# for GPU workers: the web process then spends nothing per pixel.
INFERENCE_DECODE_COMPRESSED = env_choice("INFERENCE_DECODE_COMPRESSED", "web", ("web", "worker"))

# Every Redis client retries a command once when its pooled connection was dropped (Redis restarted); the
# layer's socket timeout outlasts its blocking receive (common/redis_clients.py).
CHANNEL_LAYERS["default"]["CONFIG"]["hosts"] = [channel_layer_host(REDIS_URL, max_connections=REDIS_MAX_CONNECTIONS)]
CELERY_BROKER_TRANSPORT_OPTIONS = {"retry_on_timeout": True, "health_check_interval": 10}
CELERY_REDIS_BACKEND_HEALTH_CHECK_INTERVAL = 10
CELERY_TASK_PUBLISH_RETRY = True
CELERY_TASK_PUBLISH_RETRY_POLICY = {"max_retries": 3, "interval_start": 0, "interval_step": 0.2, "interval_max": 1}

# Behind an HTTPS proxy: RS_HTTPS=1 makes cookies secure and sends HSTS; SECURE_PROXY_SSL_HEADER names the
# header the proxy sets (e.g. X-Forwarded-Proto) so Django knows the request came over HTTPS.
RS_HTTPS = env_bool("RS_HTTPS", False)
SESSION_COOKIE_SECURE = CSRF_COOKIE_SECURE = RS_HTTPS
SECURE_HSTS_SECONDS = env_int("HSTS_SECONDS", 31_536_000, minimum=0) if RS_HTTPS else 0
SECURE_HSTS_INCLUDE_SUBDOMAINS = False
_proxy_header = env_str("SECURE_PROXY_SSL_HEADER", "").strip()
SECURE_PROXY_SSL_HEADER = ("HTTP_" + _proxy_header.upper().replace("-", "_"), "https") if _proxy_header else None
SESSION_COOKIE_HTTPONLY = True
X_FRAME_OPTIONS = "DENY"

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator", "OPTIONS": {"min_length": 10}},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]

# Login throttling (django-axes, webapp/security/login_lockout.py): failures count per username at an address;
# at LOGIN_FAILURE_LIMIT the pair waits LOGIN_FIRST_DELAY_SECONDS after its last failure, doubling with each
# further failure up to LOGIN_COOLOFF_MINUTES; the lock-out page says how long. Failures are remembered a day,
# forgotten at a successful login.
AUTHENTICATION_BACKENDS = [
    "webapp.security.auth_backends.LoginThrottleBackend",
    "django.contrib.auth.backends.ModelBackend",
]
AXES_HANDLER = "webapp.security.login_lockout.ProgressiveLockoutHandler"
AXES_FAILURE_LIMIT = env_int("LOGIN_FAILURE_LIMIT", 5, minimum=1)
LOGIN_FIRST_DELAY_SECONDS = env_int("LOGIN_FIRST_DELAY_SECONDS", 30, minimum=1)
LOGIN_COOLOFF_MINUTES = env_int("LOGIN_COOLOFF_MINUTES", 15, minimum=1)
AXES_COOLOFF_TIME = timedelta(days=1)
AXES_LOCKOUT_PARAMETERS = [["username", "ip_address"]]
AXES_LOCKOUT_CALLABLE = "webapp.security.login_lockout.lockout_response"
AXES_RESET_COOL_OFF_ON_FAILURE_DURING_LOCKOUT = False
AXES_RESET_ON_SUCCESS = True
AXES_VERBOSE = False

# Error pages shown with DEBUG on never print connection strings (a wrong Host header shows this page).
DEFAULT_EXCEPTION_REPORTER_FILTER = "webapp.security.debug_filter.SettingsFilter"

# Bounded parsers (docs/operations.md, "Limits and production settings"): how deeply any JSON the app reads may nest (API bodies,
# fast paths, chunk headers, WebSocket messages), a step chunk's header (binary, or a multipart chunk's `steps`
# field), and each free-form object stored as JSON (a step's `info`, an episode's `metadata`).
JSON_MAX_DEPTH = env_int("JSON_MAX_DEPTH", 64, minimum=8)
CHUNK_HEADER_MAX_BYTES = env_int("CHUNK_HEADER_MAX_BYTES", 2 * 1024 * 1024, minimum=1024)
JSON_FIELD_MAX_BYTES = env_int("JSON_FIELD_MAX_BYTES", 64 * 1024, minimum=256)
# A teleop session still marked live whose socket wrote nothing for this long (a live one writes every second)
# is closed at the next hello and when a web process starts (inference.teleop.services.sessions_close_stale).
TELEOP_STALE_AFTER_S = env_int("TELEOP_STALE_AFTER_S", 60, minimum=5)
# Webhook URLs resolving to loopback, link-local, private or reserved addresses are refused in the admin
# unless this is on (webhooks.targets).
WEBHOOK_ALLOW_PRIVATE_TARGETS = env_bool("WEBHOOK_ALLOW_PRIVATE_TARGETS", False)
