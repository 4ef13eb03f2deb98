"""loadtests/common.py's guard around perf_analyzer: a run that outgrows its memory or its time
is killed and reported, not left to take the machine's memory."""

import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_ROOT / "loadtests"))

import common  # noqa: E402

# grows by 8 MB every 10 ms up to 1 GB, then waits: without the guard it outlives the timeout
GROW = [sys.executable, "-c",
        "import time\nx = []\nfor _ in range(128):\n    x.append(bytearray(8 << 20))\n    time.sleep(0.01)\n"
        "time.sleep(60)\n"]


def test_a_process_past_the_memory_limit_is_killed_and_reported():
    text, rc = common.run_guarded(GROW, timeout=15, rss_limit_mb=200, poll_s=0.1)
    assert rc == -1
    assert "past the 200 MB limit" in text


def test_a_process_past_its_time_is_killed_and_reported():
    # 5 s: time for the interpreter to start and print on a loaded machine
    text, rc = common.run_guarded([sys.executable, "-c", "print('started', flush=True)\nimport time\ntime.sleep(60)"],
                                  timeout=5, rss_limit_mb=10_000)
    assert rc == -1
    assert text.startswith("started")
    assert "[timed out after 5s]" in text


def test_a_process_within_its_limits_keeps_its_output_and_status():
    text, rc = common.run_guarded([sys.executable, "-c", "import sys\nprint('out')\nprint('err', file=sys.stderr)\nsys.exit(3)"],
                                  timeout=30, rss_limit_mb=10_000)
    assert rc == 3
    assert "out" in text and "err" in text
    assert "killed" not in text and "timed out" not in text


def test_resident_memory_of_a_gone_process_is_zero():
    assert common.resident_mb(2 ** 22 + 12345) == 0
