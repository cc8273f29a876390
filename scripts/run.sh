#!/usr/bin/env bash
# Installs what is missing, prepares the database and a demo project, then starts every process
# (web server, Celery workers, inference worker) with honcho. Ctrl-C stops them all.
source "$(dirname "$0")/lib.sh"

setup_all
ensure_redis
log "migrating the database"
python manage.py migrate --noinput >/dev/null
export RS_PORT="${RS_PORT:-8000}" RS_HOST="${RS_HOST:-127.0.0.1}"
python manage.py setup_demo
log "starting Reward Studio at http://${RS_HOST/0.0.0.0/127.0.0.1}:${RS_PORT}/  (Ctrl-C stops everything)"
exec honcho start -f Procfile
