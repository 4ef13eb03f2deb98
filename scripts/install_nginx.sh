#!/usr/bin/env bash
# Installs nginx (Debian's `nginx` package) for tests/test_nginx_affinity.py and
# loadtests/nginx_overhead.py, which run the binary themselves on a config generated from
# deploy/nginx/nginx.conf, on free loopback ports (the package's own service is not started).
exec bash "$(dirname "$0")/install_debian_package.sh" nginx nginx "tests/test_nginx_affinity.py"
