#!/usr/bin/env bash
# Installs one of Debian's packages for the tests, the way every install_<tool>.sh here needs it:
#   install_debian_package.sh <package> <command it provides> <what needs it> [--optional]
# Quiet and quick when the command is already there. The package's service is not started: a
# policy-rc.d that refuses starts is in place during the install (Debian's own mechanism),
# unless the machine already has one. Without root it fails, or with --optional says so and
# succeeds (the tests that need the tool then skip).
set -euo pipefail
package=$1 command=$2 purpose=$3 optional=${4:-}

if command -v "$command" >/dev/null 2>&1 || [ -x "/usr/sbin/$command" ]; then
    exit 0
fi
if [ "$(id -u)" != 0 ]; then
    echo "install_debian_package.sh: $package ($purpose) needs root for apt-get; install the '$package' package" >&2
    [ "$optional" = --optional ] && exit 0
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

install() { apt-get install -y -qq --no-install-recommends "$package" >/dev/null; }
if ! install 2>/dev/null; then
    # No package lists yet (a fresh machine), or stale ones.
    apt-get update -qq >/dev/null
    install
fi
command -v "$command" >/dev/null 2>&1 || [ -x "/usr/sbin/$command" ]
echo "installed Debian's $package"
