#!/usr/bin/env bash
# Installs Prometheus (Debian's `prometheus` package) for tests/test_prometheus.py, which runs
# the binary itself on a temporary config and port. Quiet and quick when it is already there.
# The package's service is not started: a policy-rc.d that refuses starts is in place during
# the install (Debian's own mechanism), unless the machine already has one.
set -euo pipefail

if command -v prometheus >/dev/null 2>&1; then
    exit 0
fi
if [ "$(id -u)" != 0 ]; then
    echo "install_prometheus.sh: needs root for apt-get (or install the 'prometheus' package)" >&2
    exit 1
fi

export DEBIAN_FRONTEND=noninteractive
policy=/usr/sbin/policy-rc.d
made_policy=
if [ ! -e "$policy" ]; then
    printf '#!/bin/sh\nexit 101\n' >"$policy"
    chmod +x "$policy"
    made_policy=1
fi
cleanup() { if [ -n "$made_policy" ]; then rm -f "$policy"; fi; }
trap cleanup EXIT

install() { apt-get install -y -qq --no-install-recommends prometheus >/dev/null; }
if ! install 2>/dev/null; then
    # No package lists yet (a fresh machine), or stale ones.
    apt-get update -qq >/dev/null
    install
fi
command -v prometheus >/dev/null
echo "installed $(prometheus --version 2>&1 | head -n1)"
