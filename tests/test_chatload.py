"""Smoke test of loadtests/chatload (issue 17 point 2): 200 live conversations on the
accumulator for a few seconds over gRPC streams and over HTTP, against the debug server; every
reply is checked by the load generator against the conversation's own running sum. Asserts 0
errors, 0 cross-talk, every conversation live during the load, and all of them released by the
idle timeout afterwards, a released conversation's next turn refused; and chatecho, the floor
under the turn latency, answering the same turns in place. The chat workload on tiny_chat: every
turn's prompt and cached token counts checked against the conversation's own history, sampled
turns against a stateless request, and a client that counts tokens differently caught."""

import json
import subprocess
import time

import pytest

from helpers import REPO_ROOT, free_ports, tritium_bin

CHATLOAD = tritium_bin().parent / "chatload"
CHATECHO = tritium_bin().parent / "chatecho"


@pytest.fixture
def chat_server(start_server, repo_copy):
    repo = repo_copy(["accumulate_oldest"])
    cfg = repo / "accumulate_oldest" / "config.pbtxt"
    cfg.write_text(cfg.read_text().replace("max_sequence_idle_microseconds: 5000000",
                                           "max_sequence_idle_microseconds: 1500000"))
    return start_server(repo)


@pytest.mark.parametrize("protocol", ["grpc", "http"])
def test_chatload_200_conversations(chat_server, protocol, tmp_path):
    assert CHATLOAD.exists(), f"{CHATLOAD} is missing: cargo build --workspace"
    srv = chat_server
    out = tmp_path / "figures.json"
    run = subprocess.run(
        [str(CHATLOAD), "--protocol", protocol, "--http", srv.http_url, "--grpc", srv.grpc_url,
         "--metrics", f"127.0.0.1:{srv.metrics_port}", "--pid", str(srv.proc.pid),
         "--conversations", "200", "--rate", "150", "--duration", "3", "--baseline-turns", "10",
         "--reclaim-wait", "10", "--json", str(out)],
        cwd=REPO_ROOT, capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stdout + run.stderr
    f = json.loads(out.read_text())
    assert f["errors"] == 0 and f["crosstalk"] == 0, f
    assert f["answered"] == f["turns"] == 450, f
    assert f["live_sequences"] == 200, f
    assert f["state_bytes_per_conversation"] == 4.0, f  # one INT32 of state each
    assert f["rss_loaded"] > 0, f
    assert f["reclaim"]["active_after"] == 0 and f["reclaim"]["state_bytes_after"] == 0, f
    assert f["reclaim"]["idle_releases"] >= 200, f
    assert f["released_turn_refused"] is True, f
    # The server's split of a turn: its compute is part of its time in the server.
    assert 0 < f["compute_per_turn_us"] <= f["server_us"], f
    assert 0 <= f["queue_us"] <= f["server_us"], f
    assert f["send_lag_us"]["count"] == f["from_send_us"]["count"] == f["answered"], f


@pytest.mark.parametrize("protocol", ["grpc", "http"])
def test_chatload_closed_loop(chat_server, protocol, tmp_path):
    """`--closed`: each of 50 conversations sends its next turn as soon as its previous one is
    answered, no rate: every conversation makes several turns, all checked, none late."""
    srv = chat_server
    out = tmp_path / "figures.json"
    run = subprocess.run(
        [str(CHATLOAD), "--closed", "--protocol", protocol, "--http", srv.http_url, "--grpc", srv.grpc_url,
         "--metrics", f"127.0.0.1:{srv.metrics_port}", "--pid", str(srv.proc.pid), "--conversations", "50",
         "--duration", "2", "--baseline-turns", "5", "--json", str(out)],
        cwd=REPO_ROOT, capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "closed loop (zero think time)" in run.stdout, run.stdout
    f = json.loads(out.read_text())
    assert f["closed"] is True and f["target_rate"] == 0, f
    assert f["errors"] == 0 and f["crosstalk"] == 0 and f["late_turns"] == 0, f
    # Several turns per conversation: the first STARTs it, the later ones are checked against its sum.
    assert f["answered"] == f["turns"] >= 3 * 50, f
    assert f["start_turn_us"]["count"] == 50 and f["later_turn_us"]["count"] == f["answered"] - 50, f
    # Every conversation live (the baseline's too, unless the 1.5 s idle timeout released it meanwhile).
    assert f["live_sequences"] in (50, 51), f
    assert f["server_cpu_us_per_turn"] > 0 and f["client_cpu_us_per_turn"] > 0, f


@pytest.mark.parametrize("protocol", ["grpc", "http"])
def test_chatload_drives_stateless_add_sub(start_server, repo_copy, protocol, tmp_path):
    """`--workload add-sub`: independent clients of a stateless model, closed loop, every reply
    checked against its own inputs; no sequence is opened."""
    srv = start_server(repo_copy(["add_sub"]))
    out = tmp_path / "figures.json"
    run = subprocess.run(
        [str(CHATLOAD), "--closed", "--workload", "add-sub", "--model", "add_sub", "--protocol", protocol,
         "--http", srv.http_url, "--grpc", srv.grpc_url, "--metrics", f"127.0.0.1:{srv.metrics_port}",
         "--pid", str(srv.proc.pid), "--conversations", "20", "--duration", "1", "--baseline-turns", "5",
         "--json", str(out)],
        cwd=REPO_ROOT, capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stdout + run.stderr
    f = json.loads(out.read_text())
    assert f["workload"] == "addsub" and f["errors"] == 0 and f["crosstalk"] == 0, f
    assert f["answered"] == f["turns"] >= 20 and f["live_sequences"] == 0, f
    assert 0 < f["compute_per_turn_us"] <= f["server_us"], f


@pytest.mark.parametrize("protocol", ["grpc", "http"])
def test_chatecho_answers_every_turn_in_place(protocol, tmp_path):
    assert CHATECHO.exists(), f"{CHATECHO} is missing: cargo build --workspace"
    http_port, grpc_port = free_ports(2)
    echo = subprocess.Popen([str(CHATECHO), "--http", f"127.0.0.1:{http_port}", "--grpc", f"127.0.0.1:{grpc_port}"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        time.sleep(0.5)
        out = tmp_path / "figures.json"
        run = subprocess.run(
            [str(CHATLOAD), "--bare-server", "--protocol", protocol, "--http", f"127.0.0.1:{http_port}",
             "--grpc", f"127.0.0.1:{grpc_port}", "--conversations", "100", "--rate", "200", "--duration", "1",
             "--baseline-turns", "10", "--json", str(out)],
            cwd=REPO_ROOT, capture_output=True, text=True, timeout=60)
        assert run.returncode == 0, run.stdout + run.stderr
        f = json.loads(out.read_text())
        assert f["errors"] == 0 and f["crosstalk"] == 0 and f["answered"] == 200, f
    finally:
        echo.terminate()
        echo.wait(timeout=10)


def chat_args(srv, protocol, tokenizer, out):
    return [str(CHATLOAD), "--workload", "chat", "--model", "tiny_chat", "--protocol", protocol,
            "--http", srv.http_url, "--grpc", srv.grpc_url, "--metrics", f"127.0.0.1:{srv.metrics_port}",
            "--pid", str(srv.proc.pid), "--tokenizer", str(tokenizer), "--max-tokens", "6",
            "--conversations", "8", "--rate", "8", "--duration", "3", "--baseline-turns", "4",
            "--reference-every", "4", "--json", str(out)]


@pytest.mark.parametrize("protocol", ["grpc", "http"])
def test_chatload_chat_conversations_on_tiny_chat(start_server, repo_copy, protocol, tmp_path):
    """8 conversations of 3 turns each: every turn after the first reuses exactly its own
    history's cache, and the sampled turns answer the same as a stateless request."""
    repo = repo_copy(["tiny_chat"])
    srv = start_server(repo)
    out = tmp_path / "figures.json"
    tokenizer = repo / "tiny_chat" / "1" / "tokenizer.json"
    run = subprocess.run(chat_args(srv, protocol, tokenizer, out), cwd=REPO_ROOT, capture_output=True, text=True,
                         timeout=300)
    assert run.returncode == 0, run.stdout + run.stderr
    f = json.loads(out.read_text())
    assert f["workload"] == "chat" and f["answered"] == f["turns"] == 24, f
    assert f["errors"] == f["crosstalk"] == f["history_mismatches"] == f["reference_mismatches"] == 0, f
    assert f["references_checked"] == 6, f  # turns 0, 4, ..., 20
    assert (f["start_turn_us"]["count"], f["later_turn_us"]["count"]) == (8, 16), f
    assert f["live_sequences"] == 9 and f["evictions"] == 0, f  # 8 and the baseline's
    # tiny_chat's KV cache: 4 layers x (K, V) x 4 heads x 32 floats per token, and its token id.
    per_token = 4 * 2 * 4 * 32 * 4 + 8
    assert f["state_bytes"] % per_token == 0 and f["state_bytes_per_conversation"] > 20 * per_token, f
    assert 0 < f["compute_per_turn_us"] <= f["server_us"], f


def test_chatload_chat_catches_a_miscounted_prompt(start_server, repo_copy, tmp_path):
    """A client whose tokenizer lacks the special tokens counts every prompt differently from the
    server: every turn is reported as a mismatch and chatload fails."""
    repo = repo_copy(["tiny_chat"])
    srv = start_server(repo)
    tokenizer = json.loads((repo / "tiny_chat" / "1" / "tokenizer.json").read_text())
    tokenizer["added_tokens"] = []
    wrong = tmp_path / "tokenizer.json"
    wrong.write_text(json.dumps(tokenizer))
    out = tmp_path / "figures.json"
    args = chat_args(srv, "grpc", wrong, out)
    args[args.index("--baseline-turns") + 1] = "0"
    run = subprocess.run(args, cwd=REPO_ROOT, capture_output=True, text=True, timeout=300)
    assert run.returncode == 2, run.stdout + run.stderr
    f = json.loads(out.read_text())
    assert f["history_mismatches"] == f["answered"] == 24 and f["crosstalk"] >= 24, f
    assert "prompt_tokens" in f["first_error"], f


@pytest.mark.parametrize("protocol", ["grpc", "http"])
def test_chatload_turns_join_the_servers_trace(start_server, repo_copy, protocol, tmp_path):
    """`--turns-out` writes every answered turn with its request id and CLOCK_MONOTONIC times, and
    loadtests/chat_tail.py joins each one to its record in the server's trace file (rate 1)."""
    import sys
    sys.path.insert(0, str(REPO_ROOT / "loadtests"))
    import chat_tail

    repo = repo_copy(["tiny_chat"])
    srv = start_server(repo, args=chat_tail.trace_args(str(tmp_path)))
    point = f"{protocol}-8"
    args = chat_args(srv, protocol, repo / "tiny_chat" / "1" / "tokenizer.json", tmp_path / "figures.json")
    args += ["--turns-out", str(tmp_path / f"{point}-turns.csv")]
    run = subprocess.run(args, cwd=REPO_ROOT, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stdout + run.stderr
    rows = (tmp_path / f"{point}-turns.csv").read_text().splitlines()
    assert rows[0].startswith("k,conversation,start,due_ns,sent_ns,answered_ns") and len(rows) == 25, rows[:3]
    for row in rows[1:]:
        k, conversation, start, due, sent, answered, prompt, completion, cached = map(int, row.split(","))
        assert due <= sent < answered and conversation == k % 8 and completion >= 1, row
        assert start == (k < 8) and (cached == 0) == (k < 8), row
    assert srv.stop() == 0  # the trace file is complete
    s = chat_tail.analyze(str(tmp_path), point)
    assert s["turns"] == s["joined_of"] == 24, s
    assert 0 < s["all"]["compute"] <= s["all"]["latency"] and s["all"]["queue"] >= 0, s
    assert s["p99_us"] >= s["p50_us"] > 0 and s["mean_compute_us"] > 0, s
