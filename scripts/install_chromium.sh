#!/usr/bin/env bash
# Installs Debian's `chromium` and `chromium-driver` (/usr/bin/chromedriver, the same version) for
# the real-browser tests of the actor page: tests/test_actors_page.py runs chromium headless with
# --dump-dom, tests/test_actors_page_live.py drives it through chromedriver with the `selenium`
# package of tests/requirements.txt, which is given the driver's path and never downloads one.
# Without root it says so and leaves the browser tests to skip.
set -euo pipefail
here="$(dirname "$0")"
bash "$here/install_debian_package.sh" chromium chromium "the actor page's browser tests" --optional
exec bash "$here/install_debian_package.sh" chromium-driver chromedriver "the actor page's browser tests" --optional
