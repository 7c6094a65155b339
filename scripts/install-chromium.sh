#!/usr/bin/env bash
# Installs the distribution's Chromium when /usr/bin/chromium is missing. The
# admin page's browser test drives it headless (chromedp); nothing else needs
# it. Idempotent: does nothing when the browser is there.
set -euo pipefail

if [ -x /usr/bin/chromium ]; then
  exit 0
fi

echo "Chromium not found; installing the distribution's package ..." >&2
if ! command -v apt-get >/dev/null 2>&1; then
  echo "error: no apt-get here. Install Chromium with your package manager (the browser test looks for /usr/bin/chromium, or QUEUEBOX_CHROMIUM)." >&2
  exit 1
fi
SUDO=""
if [ "$(id -u)" -ne 0 ]; then
  if command -v sudo >/dev/null 2>&1; then SUDO="sudo"; else
    echo "error: installing packages needs root; run: apt-get install -y chromium" >&2
    exit 1
  fi
fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
# Debian's package is "chromium"; fonts-liberation gives pages readable text.
$SUDO apt-get install -y -qq --no-install-recommends chromium fonts-liberation >/dev/null
[ -x /usr/bin/chromium ] || { echo "error: the install finished but /usr/bin/chromium is still missing" >&2; exit 1; }
echo "Chromium installed." >&2
