"""loadtests/ab_windows.py: the per-round ratios and medians of two builds' windows, and the
protocols it accepts."""

import sys

import pytest

from helpers import REPO_ROOT

sys.path.insert(0, str(REPO_ROOT / "loadtests"))
import ab_windows  # noqa: E402


def w(ips, per_exec, cpu):
    return {"infer_per_s": ips, "per_execution": per_exec, "server_cpu_us": cpu}


ROUNDS = [
    {"old": w(1000, 7.0, 200), "new": w(1100, 8.0, 180)},
    {"old": w(900, 7.0, 220), "new": w(1350, 8.0, 150)},
    {"old": w(1200, 7.0, 180), "new": w(1080, 8.0, 200)},
]


def test_ratios_are_new_over_old_within_each_round_and_their_median():
    r = ab_windows.ratios(ROUNDS)
    assert r["infer_per_s"] == pytest.approx([1.1, 1.5, 0.9])
    assert r["server_cpu"] == pytest.approx([0.9, 150 / 220, 200 / 180])
    assert r["infer_per_s_median"] == pytest.approx(1.1)
    assert r["server_cpu_median"] == pytest.approx(0.9)


def test_the_summary_has_one_row_per_protocol_and_one_per_round():
    class Args:
        model, concurrency, old, new, rounds, window_s, warm_s = "mlp", 16, "/o", "/n", 3, 4.0, 2.0
    header = {"git_head": "0123456789abcdef", "loadavg_at_start": 0.5}
    lines = ab_windows.summary_lines(Args, "20261206-000000", header, {"grpc": ROUNDS})
    text = "\n".join(lines)
    assert "| grpc | 1.100 (0.900–1.500) | 0.900 (0.682–1.111) | 1000 | 1100 | 7.00 / 8.00 |" in text
    assert "| 1 | 900, 7.00, 220 | 1350, 8.00, 150 | 1.500 |" in text


def test_protocols_are_grpc_or_http():
    assert ab_windows.parse_protocols("grpc,http") == ["grpc", "http"]
    assert ab_windows.parse_protocols("http") == ["http"]
    for bad in ("", "grpc,tcp", "HTTP"):
        with pytest.raises(ValueError):
            ab_windows.parse_protocols(bad)
