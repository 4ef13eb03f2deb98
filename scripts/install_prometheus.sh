#!/usr/bin/env bash
# Installs Prometheus (Debian's `prometheus` package) for tests/test_prometheus.py, which runs
# the binary itself on a temporary config and port.
exec bash "$(dirname "$0")/install_debian_package.sh" prometheus prometheus "tests/test_prometheus.py"
