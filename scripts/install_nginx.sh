#!/usr/bin/env bash
# Installs nginx (Debian's `nginx` package) for tests/test_nginx_affinity.py and
# loadtests/nginx_overhead.py, which run the binary themselves on a config generated from
# deploy/nginx/nginx.conf, on free loopback ports. Quiet and quick when it is already there.
# The package's service is not started: a policy-rc.d that refuses starts is in place during
# the install (Debian's own mechanism), unless the machine already has one.
set -euo pipefail

if command -v nginx >/dev/null 2>&1 || [ -x /usr/sbin/nginx ]; then
    exit 0
fi
if [ "$(id -u)" != 0 ]; then
    echo "install_nginx.sh: needs root for apt-get (or install the 'nginx' package)" >&2
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

install() { apt-get install -y -qq --no-install-recommends nginx >/dev/null; }
if ! install 2>/dev/null; then
    # No package lists yet (a fresh machine), or stale ones.
    apt-get update -qq >/dev/null
    install
fi
echo "installed $(/usr/sbin/nginx -v 2>&1 | head -n1)"
