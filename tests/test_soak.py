"""The soak's CI version (issue 16, point 7): loadtests/soak.py for 60 s at 80 % of the
saturation it measures first, on the debug build, with every answer checked and the server's RSS
and open files flat (under 5 % growth after the warm-up). The 10-minute run is the same script
with its defaults, on a release build."""
import json
import subprocess
import sys

from helpers import REPO_ROOT, tritium_bin


def test_sixty_seconds_of_mixed_traffic_lose_nothing_and_leak_nothing(tmp_path):
    run = subprocess.run(
        [sys.executable, str(REPO_ROOT / "loadtests" / "soak.py"), "--server", str(tritium_bin()),
         "--seconds", "60", "--calibrate", "8", "--out", str(tmp_path)],
        capture_output=True, text=True, timeout=240)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    verdict = json.loads(run.stdout.strip().splitlines()[-1])
    assert verdict["ok"] and verdict["unexpected"] == 0 and verdict["achieved_ops_s"] > 0, verdict
