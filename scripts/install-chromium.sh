#!/usr/bin/env bash
# Installs Chromium from the distribution's packages for the console's
# browser test (console/browser_test.go), unless one is already on PATH.
# Idempotent. Exits non-zero when it cannot install (no apt, no network, not
# root): callers that must not fail on that (.ci/run) say so themselves, and
# the browser test then skips saying "chromium not installed".
set -euo pipefail

for b in chromium chromium-browser google-chrome google-chrome-stable headless-shell; do
	if command -v "$b" >/dev/null 2>&1; then
		echo "chromium already installed: $(command -v "$b")"
		exit 0
	fi
done

if ! command -v apt-get >/dev/null 2>&1; then
	echo "install-chromium: apt-get not available; install chromium by hand" >&2
	exit 1
fi

sudo=""
if [ "$(id -u)" -ne 0 ]; then
	if ! command -v sudo >/dev/null 2>&1; then
		echo "install-chromium: not root and no sudo; install chromium by hand" >&2
		exit 1
	fi
	sudo="sudo -n" # never wait for a password: fail, and the test skips
fi

export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq
# Without recommends (a desktop's worth of packages), but with one font:
# a page without fonts renders its text as nothing at all.
$sudo apt-get install -y -qq --no-install-recommends chromium fonts-dejavu-core
echo "chromium installed: $(command -v chromium)"
