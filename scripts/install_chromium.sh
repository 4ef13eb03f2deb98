#!/usr/bin/env bash
# Installs Debian's `chromium` for the real-browser test of the actor page
# (tests/test_actors_page.py runs it headless with --dump-dom; nothing else is downloaded).
# Quiet and quick when it is already there; without root it says so and leaves the browser test
# to skip.
set -euo pipefail

if command -v chromium >/dev/null 2>&1; then
    exit 0
fi
if [ "$(id -u)" != 0 ]; then
    echo "install_chromium.sh: needs root for apt-get (or install the 'chromium' package); the browser test of the actor page will skip" >&2
    exit 0
fi
export DEBIAN_FRONTEND=noninteractive
install() { apt-get install -y -qq --no-install-recommends chromium >/dev/null; }
if ! install 2>/dev/null; then
    # No package lists yet (a fresh machine), or stale ones.
    apt-get update -qq >/dev/null
    install
fi
command -v chromium >/dev/null
echo "installed $(chromium --version 2>/dev/null | head -n1)"
