#!/usr/bin/env bash
# Runs the whole test suite against PostgreSQL and Redis (started here when they are not running),
# with real Celery workers, inference workers, Chromium and the ManiSkill simulator, after the lint and the
# type checks (ruff, tsc, mypy: the first that fails stops the run).
# Extra arguments go to pytest, e.g. scripts/test.sh tests/labeling -x
source "$(dirname "$0")/lib.sh"

setup_all
ensure_interop_env  # RLinf's and DI-engine's releases for tests/interop
ensure_interop_peft_env  # the same with the newest peft RLinf's `embodied` extra allows (test_rlinf_vlm_lora.py)
ensure_lerobot_env  # LeRobot's release for tests/interop/test_lerobot_dataset.py
apt_install chromium
ensure_postgres
export REDIS_URL="${REDIS_URL:-redis://127.0.0.1:6379/1}"
ensure_redis
ensure_seaweedfs  # the object store of tests/webapp/filestore (STORAGE_BACKEND=s3)
export DATABASE_URL="${DATABASE_URL:-postgres://postgres@127.0.0.1:5432/reward_studio}"
export DEBUG=0 RS_RUN_ENV=""  # not the settings a running app wrote (webapp/run_env.py)
log "lint (ruff)"
ruff check .
ruff format --check . >/dev/null || die "ruff format would change files: run 'ruff format .'"
log "type check (tsc --strict on the front end)"
(cd frontend && npx --no-install tsc --noEmit -p .) || die "the front end has type errors (see above)"
log "type check (mypy with django-stubs on the app packages; see [tool.mypy] in pyproject.toml)"
mypy . || die "the Python code has type errors (see above)"
log "tests (pytest on $DATABASE_URL)"
exec python -m pytest "$@"
