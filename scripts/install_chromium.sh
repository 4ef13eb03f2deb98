#!/usr/bin/env bash
# Installs Debian's `chromium` for the real-browser test of the actor page
# (tests/test_actors_page.py runs it headless with --dump-dom; nothing else is downloaded).
# Without root it says so and leaves the browser test to skip.
exec bash "$(dirname "$0")/install_debian_package.sh" chromium chromium "the actor page's browser test" --optional
