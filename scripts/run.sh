#!/usr/bin/env bash
# Installs what is missing, prepares the database and a demo project, then starts every process
# (web server, Celery workers, beat, inference worker) under supervisord, which restarts a process that
# crashes. Logs go to data/logs/; Ctrl-C stops them all.
source "$(dirname "$0")/lib.sh"

setup_all
ensure_redis
require_redis_maxmemory
export RS_PORT="${RS_PORT:-8000}" RS_HOST="${RS_HOST:-127.0.0.1}"
# manage.py and robot_agent beside the app (and below) use these settings, not an earlier run's
python webapp/run_env.py "$ROOT/.run.env"
log "migrating the database"
python manage.py migrate --noinput >/dev/null
python manage.py setup_demo
DATA="${RS_DATA_DIR:-$ROOT/data}"
python scripts/supervisor_conf.py Procfile "$DATA" >"$DATA/supervisord.conf"
log "starting Reward Studio at http://${RS_HOST/0.0.0.0/127.0.0.1}:${RS_PORT}/  (Ctrl-C stops everything)"
log "logs: $DATA/logs/<process>.log; status: supervisorctl -c $DATA/supervisord.conf status"
exec supervisord -c "$DATA/supervisord.conf"
