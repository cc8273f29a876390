#!/usr/bin/env bash
# Gathers, here, what bench/gpu_serving.py needs on a GPU machine without internet whose image already has
# Python 3.12, PyTorch, torchvision, numpy, Pillow, requests, urllib3, PyYAML, msgpack, uvloop and
# prometheus-client (the device image of /work/.library/device/KINDS.md):
#   .whl/    the web process's and inference worker's other Python packages, as cp312 manylinux wheels, pinned
#            as requirements.lock pins them (--no-deps: each one needed is named below)
#   .redis/  a Redis server unpacked from Debian's packages (redis-server, redis-tools and the libraries
#            redis-server links), run from there with LD_LIBRARY_PATH (bench/gpu_serving.py finds it)
# Both folders are ignored by git (.gitignore); carry them with the working tree. Usage, in the
# repository's root: bash bench/gpu_serving_prepare.sh [python-version, default 3.12]
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${1:-3.12}"
# What `import webapp.asgi, webapp.urls` and `manage.py inference_worker` load beyond the image's packages
# (read off sys.modules here), plus channels_redis (the channel layer).
NAMES="django asgiref sqlparse djangorestframework drf-spectacular drf-spectacular-sidecar uritemplate inflection
channels channels_redis redis hiredis celery kombu billiard vine amqp tzlocal uvicorn httptools websockets
watchfiles dj-database-url whitenoise rules django-axes limits deprecated psycopg psycopg-binary defusedxml
cffi cryptography greenlet typing_extensions"

pin() {  # NAME==VERSION as requirements.lock pins it (names compared as pip normalises them)
  local want; want="$(echo "$1" | tr 'A-Z_.' 'a-z--')"
  grep -v '^\s*#' requirements.lock | sed -n 's/^\([A-Za-z0-9_.-]*\)==\([^ ;\\]*\).*/\1 \2/p' |
    while read -r name version; do
      if [ "$(echo "$name" | tr 'A-Z_.' 'a-z--')" = "$want" ]; then echo "$name==$version"; fi
    done | head -1
}

rm -rf .whl .redis && mkdir -p .whl .redis/debs
specs=()
for name in $NAMES; do
  spec="$(pin "$name")"
  [ -n "$spec" ] || { echo "$name is not in requirements.lock" >&2; exit 1; }
  specs+=("$spec")
done
python3 -m pip download -q --no-deps --only-binary=:all: --python-version "$PY" --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 \
  --platform manylinux2014_x86_64 --platform manylinux1_x86_64 --platform manylinux_2_34_x86_64 \
  --platform manylinux_2_31_x86_64 --platform manylinux_2_24_x86_64 -d .whl "${specs[@]}"

(cd .redis/debs && apt-get download redis-server redis-tools libjemalloc2 liblzf1 libatomic1 libssl3 libsystemd0)
for deb in .redis/debs/*.deb; do dpkg -x "$deb" .redis; done
rm -rf .redis/debs .redis/usr/share
echo "wheels: $(ls .whl | wc -l) files, $(du -sh .whl | cut -f1); redis: $(du -sh .redis | cut -f1)"
LD_LIBRARY_PATH=.redis/usr/lib/x86_64-linux-gnu .redis/usr/bin/redis-server --version
