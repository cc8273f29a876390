#!/usr/bin/env bash
# Software Vulkan for SAPIEN/ManiSkill on machines without a GPU (idempotent).
#
# SAPIEN needs a Vulkan device even for physics. Debian 12's own lavapipe (Mesa 22) is too old, so this
# installs the runtime libraries from the normal suite, then fetches Mesa 25's lavapipe from
# bookworm-backports with a private APT configuration (system packages are not upgraded) and unpacks it
# into a project-local folder (default .vendor/vulkan). On Debian 13+ the system lavapipe is recent enough
# and is used directly. The last line printed is the `export VK_ICD_FILENAMES=...` to use;
# robot_agent sets it by itself when the folder exists and the variable is unset.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
DEST="${VULKAN_VENDOR_DIR:-$ROOT/.vendor/vulkan}"
ICD="$DEST/lvp_icd.json"
SUDO=""
if [ "$(id -u)" != "0" ]; then SUDO="sudo"; fi

write_icd() {
  local lib="$1"
  mkdir -p "$DEST"
  printf '{"file_format_version": "1.0.0", "ICD": {"library_path": "%s", "api_version": "1.4.305"}}\n' "$lib" >"$ICD"
}

if [ -f "$ICD" ] && [ -f "$(sed -n 's/.*"library_path": "\([^"]*\)".*/\1/p' "$ICD")" ]; then
  echo "software Vulkan already set up in $DEST" >&2
  echo "export VK_ICD_FILENAMES=$ICD"
  exit 0
fi

# Runtime dependencies (loader, LLVM, libdrm, ...) from the machine's normal suite.
if ! dpkg -s libvulkan1 mesa-vulkan-drivers >/dev/null 2>&1; then
  echo "installing libvulkan1 and mesa-vulkan-drivers (runtime dependencies)" >&2
  $SUDO apt-get update -qq >&2
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends libvulkan1 mesa-vulkan-drivers >&2
fi

. /etc/os-release
CODENAME="${VERSION_CODENAME:-}"
if [ "${ID:-}" = "debian" ] && [ "$CODENAME" = "bookworm" ]; then
  TMP="$(mktemp -d)"
  trap 'rm -rf "$TMP"' EXIT
  mkdir -p "$TMP/lists/partial" "$TMP/cache/archives/partial" "$TMP/parts" "$TMP/dl"
  MIRROR="$(grep -hE '^(URIs:|deb )' /etc/apt/sources.list.d/*.sources /etc/apt/sources.list 2>/dev/null \
    | grep -oE 'https?://[^ ]+/debian/?( |$)' | grep -v security | head -n1 | tr -d ' ' || true)"
  MIRROR="${MIRROR:-http://deb.debian.org/debian}"
  echo "deb ${MIRROR%/} bookworm-backports main" >"$TMP/sources.list"
  APT_OPTS=(-o "Dir::Etc::SourceList=$TMP/sources.list" -o "Dir::Etc::SourceParts=$TMP/parts"
    -o "Dir::State::Lists=$TMP/lists" -o "Dir::Cache=$TMP/cache" -o "APT::Sandbox::User=root")
  echo "downloading mesa-vulkan-drivers from bookworm-backports" >&2
  apt-get "${APT_OPTS[@]}" update -qq >&2
  (cd "$TMP/dl" && apt-get "${APT_OPTS[@]}" download mesa-vulkan-drivers/bookworm-backports >&2)
  mkdir -p "$DEST"
  dpkg-deb -x "$TMP"/dl/mesa-vulkan-drivers_*.deb "$DEST"
  LIB="$(find "$DEST" -name libvulkan_lvp.so | head -n1)"
else
  LIB="$(find /usr/lib -name libvulkan_lvp.so 2>/dev/null | head -n1)"
fi
if [ -z "$LIB" ]; then
  echo "error: libvulkan_lvp.so not found after installation" >&2
  exit 1
fi
write_icd "$LIB"
echo "software Vulkan ready: $LIB" >&2
echo "export VK_ICD_FILENAMES=$ICD"
