#!/usr/bin/env bash
# Install what is missing of: the Mesa libraries MuJoCo needs for headless (EGL/OSMesa) rendering, and Chromium,
# which tests/test_bench_view.py renders the benchmark viewer with (headless).
set -euo pipefail
PKGS="libegl1 libgl1 libglx-mesa0 libegl-mesa0 libgl1-mesa-dri libosmesa6 chromium"
missing=""
for p in $PKGS; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
done
[ -z "$missing" ] && exit 0
if ! command -v apt-get >/dev/null; then
  echo "install_system_deps: missing$missing and no apt-get; install them by hand" >&2
  exit 1
fi
SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
echo "install_system_deps: installing$missing"
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends $missing >/dev/null
