#!/usr/bin/env bash
# Installs what is missing, prepares the database and a demo project, then starts every process
# (web server, Celery workers, inference worker) with honcho. Ctrl-C stops them all.
source "$(dirname "$0")/lib.sh"

setup_all
ensure_redis
log "migrating the database"
python manage.py migrate --noinput >/dev/null
python manage.py setup_demo
export RS_PORT="${RS_PORT:-8000}"
log "starting Reward Studio at http://127.0.0.1:${RS_PORT}/  (Ctrl-C stops everything)"
exec honcho start -f Procfile
