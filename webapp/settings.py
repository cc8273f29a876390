"""Reward Studio settings. Every deploy-time value comes from an environment variable (see README)."""

from __future__ import annotations

from pathlib import Path

import dj_database_url

from .env import env_bool, env_int, env_list, env_path, env_str, secret_key

BASE_DIR = Path(__file__).resolve().parent.parent
DATA_DIR = env_path("RS_DATA_DIR", BASE_DIR / "data")

DEBUG = env_bool("DEBUG", True)
SECRET_KEY = secret_key("SECRET_KEY", DATA_DIR / "secret_key.txt")
ALLOWED_HOSTS = env_list("ALLOWED_HOSTS", ["localhost", "127.0.0.1", "[::1]", "testserver"])
CSRF_TRUSTED_ORIGINS = env_list("CSRF_TRUSTED_ORIGINS", [])

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "rest_framework",
    "drf_spectacular",
    "channels",
    "webapp",
    "labeling",
    "training",
    "inference",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
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
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

REDIS_URL = env_str("REDIS_URL", "redis://127.0.0.1:6379/0")

# Files (frames, exports, checkpoints) go through Django's storage API. STORAGE_BACKEND may name any
# storage class (for example django-storages' S3 backend) with STORAGE_OPTIONS set through its own env.
MEDIA_ROOT = env_path("MEDIA_ROOT", DATA_DIR / "media")
MEDIA_URL = "/media/"
STATIC_ROOT = env_path("STATIC_ROOT", BASE_DIR / "staticfiles")
STATIC_URL = "/static/"
STATICFILES_DIRS = [BASE_DIR / "frontend" / "dist"]
STORAGES = {
    "default": {"BACKEND": env_str("STORAGE_BACKEND", "django.core.files.storage.FileSystemStorage")},
    "staticfiles": {"BACKEND": "whitenoise.storage.CompressedStaticFilesStorage"},
}
FILE_UPLOAD_MAX_MEMORY_SIZE = 64 * 1024 * 1024
DATA_UPLOAD_MAX_MEMORY_SIZE = env_int("DATA_UPLOAD_MAX_MEMORY_SIZE", 256 * 1024 * 1024, minimum=1024)
DATA_UPLOAD_MAX_NUMBER_FILES = 10_000

# Image guard rails for ingest (Pillow decompression-bomb limit follows the same bound).
MAX_IMAGE_SIDE = env_int("MAX_IMAGE_SIDE", 2048, minimum=16)
MAX_IMAGE_PIXELS = env_int("MAX_IMAGE_PIXELS", 2048 * 2048, minimum=256)

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = False
USE_TZ = True

LOGIN_URL = "/accounts/login/"
LOGIN_REDIRECT_URL = "/"
LOGOUT_REDIRECT_URL = "/accounts/login/"

REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "labeling.auth.AgentTokenAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "EXCEPTION_HANDLER": "webapp.errors.exception_handler",
}
SPECTACULAR_SETTINGS = {
    "TITLE": "Reward Studio API",
    "DESCRIPTION": "Ingest robot episodes, label them, train reward models and serve rewards.",
    "VERSION": "0.1.0",
    "SERVE_PERMISSIONS": ["rest_framework.permissions.IsAuthenticated"],
}

# Channels on Redis.
CHANNEL_LAYERS = {
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
    "training.tasks.recover_stale_jobs": {"queue": CELERY_QUEUE_DEFAULT},
}
CELERY_TASK_SERIALIZER = "json"
CELERY_RESULT_SERIALIZER = "json"
CELERY_ACCEPT_CONTENT = ["json"]
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_TASK_ACKS_LATE = True
CELERY_TASK_REJECT_ON_WORKER_LOST = False
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True

# Training jobs survive their workers: resume checkpoints, heartbeats, requeue with bounded attempts.
TRAINING_CHECKPOINT_SECONDS = env_int("TRAINING_CHECKPOINT_SECONDS", 300, minimum=0)
TRAINING_HEARTBEAT_SECONDS = env_int("TRAINING_HEARTBEAT_SECONDS", 20, minimum=1)
TRAINING_STALE_AFTER_SECONDS = env_int("TRAINING_STALE_AFTER_SECONDS", 120, minimum=2)
TRAINING_MAX_ATTEMPTS = env_int("TRAINING_MAX_ATTEMPTS", 3, minimum=1)
TRAINING_SWEEP_SECONDS = env_int("TRAINING_SWEEP_SECONDS", 60, minimum=1)

# Where model weights may be read from (pretrained backbones, VLM base folders): local paths only.
MODEL_DIR = env_path("MODEL_DIR", DATA_DIR / "models")

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"console": {"class": "logging.StreamHandler"}},
    "root": {"handlers": ["console"], "level": env_str("LOG_LEVEL", "INFO")},
}

# Static files: WhiteNoise serves frontend/dist straight from the finders (no collectstatic needed locally).
WHITENOISE_USE_FINDERS = True
WHITENOISE_AUTOREFRESH = DEBUG
