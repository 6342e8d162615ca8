#!/usr/bin/env bash
# Debian's chromium, for scripts/ci/check_report.sh (nothing when it is installed).
set -euo pipefail
command -v chromium >/dev/null && exit 0
sudo=""; [ "$(id -u)" = 0 ] || sudo="sudo"
$sudo apt-get update -q && $sudo apt-get install -y -q chromium
