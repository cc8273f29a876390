#!/usr/bin/env bash
# Regenerates requirements.lock from requirements.in in a scratch virtualenv.
source "$(dirname "$0")/lib.sh"
scratch="$(mktemp -d)"
python3.11 -m venv "$scratch"
"$scratch/bin/pip" install -q -r requirements.in
"$scratch/bin/pip" freeze --exclude-editable | grep -v '^-e' > requirements.lock
rm -rf "$scratch"
log "requirements.lock updated ($(wc -l < requirements.lock) packages)"
