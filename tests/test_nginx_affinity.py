"""Sequence affinity through a real load balancer: three Tritium replicas on loopback behind
Debian's nginx running the checked-in deploy/nginx/nginx.conf (consistent hash on the
x-sequence-id header, for HTTP and for gRPC through grpc_pass).

- 1,000 conversations over HTTP and 1,000 over gRPC on the stateful `accumulate` model: every
  running sum is right, and the replicas' own statistics show every turn ran exactly once, on
  the replica that started its sequence (successes = turns sent, failures = 0: a turn that
  reached a replica not holding its sequence would have failed there first); stateless traffic
  spreads over all three; the totals equal what was sent.
- A rolling restart of one replica under conversation load (HTTP and gRPC): SIGTERM drains it,
  it exits, it comes back on the same ports; no turn fails and no new conversation fails after
  the client's retry (a refused START is retried under a new sequence id)."""
import os
import random
import re
import signal
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
import requests
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from helpers import Server, copy_bundled_repo, wait_until
from lb import Nginx, nginx_bin

CONVERSATIONS = 1000
TURNS = 3


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    if nginx_bin() is None:
        if os.environ.get("CI"):
            pytest.fail("nginx is missing: .ci/run installs Debian's nginx (scripts/install_nginx.sh)")
        pytest.skip("nginx is not installed (bash scripts/install_nginx.sh)")
    base = tmp_path_factory.mktemp("cluster")
    replicas = []
    for i in range(3):
        repo = copy_bundled_repo(base / f"models{i}", ["accumulate", "identity_fp32"])
        replicas.append(Server(repo, log_dir=base, exit_timeout_secs=30))
    lb = None
    try:
        for r in replicas:
            r.start()
        lb = Nginx([r.http_port for r in replicas], [r.grpc_port for r in replicas], base / "nginx").start()
        yield replicas, lb
    finally:
        if lb:
            lb.stop()
        for r in replicas:
            r.stop()
            r.kill()


def stats(replica, model):
    """(successes, failures) of `model` in the replica's statistics extension."""
    s = replica.get(f"/v2/models/{model}/stats").json()["model_stats"][0]["inference_stats"]
    return s["success"]["count"], s["fail"]["count"]


def live_sequences(replica):
    text = requests.get(replica.metrics_url, timeout=5).text
    return float(re.search(r"^tritium_drain_live_sequences (\S+)$", text, re.M).group(1))


def value_input(proto, v):
    t = proto.InferInput("INPUT", [1, 1], "INT32")
    t.set_data_from_numpy(np.array([[v]], dtype=np.int32))
    return t


def turn(client, proto, seq, v, start=False, end=False):
    res = client.infer("accumulate", [value_input(proto, v)], sequence_id=seq, sequence_start=start,
                       sequence_end=end, headers={"x-sequence-id": str(seq)})
    return int(res.as_numpy("OUTPUT")[0][0])


def client_for(proto, lb):
    if proto is httpclient:
        return httpclient.InferenceServerClient(lb.http_url, network_timeout=120.0)
    return grpcclient.InferenceServerClient(lb.grpc_url)


def conversations(proto, lb, ids, workers=8):
    """Runs a conversation of TURNS turns for each id (worker threads, a client each); returns
    the wrong sums found."""
    wrong = []
    chunks = [ids[i::workers] for i in range(workers)]

    def run(chunk):
        client = client_for(proto, lb)
        rng = random.Random(chunk[0] if chunk else 0)
        for seq in chunk:
            total = 0
            for t in range(TURNS):
                v = rng.randint(-50, 50)
                total += v
                got = turn(client, proto, seq, v, start=t == 0, end=t == TURNS - 1)
                if got != total:
                    wrong.append((seq, t, got, total))
        client.close()

    with ThreadPoolExecutor(workers) as pool:
        list(pool.map(run, chunks))
    return wrong


@pytest.mark.parametrize("proto", [httpclient, grpcclient], ids=["http", "grpc"])
def test_every_conversation_stays_on_one_replica(cluster, proto):
    replicas, lb = cluster
    before = [stats(r, "accumulate") for r in replicas]
    base_id = 1_000_000 if proto is httpclient else 2_000_000
    wrong = conversations(proto, lb, [base_id + i for i in range(CONVERSATIONS)])
    assert wrong == [], f"{len(wrong)} wrong running sums, e.g. {wrong[:5]}"
    after = [stats(r, "accumulate") for r in replicas]
    served = [a[0] - b[0] for a, b in zip(after, before)]
    failed = [a[1] - b[1] for a, b in zip(after, before)]
    print(f"\naffinity {proto.__name__.split('.')[-1]}: turns served per replica {served}, failed {failed}")
    assert failed == [0, 0, 0], "a turn reached a replica that does not hold its sequence"
    assert sum(served) == CONVERSATIONS * TURNS
    assert all(n % TURNS == 0 and n > 0 for n in served), served


@pytest.mark.parametrize("proto", [httpclient, grpcclient], ids=["http", "grpc"])
def test_stateless_traffic_spreads_over_every_replica(cluster, proto):
    replicas, lb = cluster
    before = [stats(r, "identity_fp32")[0] for r in replicas]
    client = client_for(proto, lb)
    sent = 300
    for i in range(sent):
        x = proto.InferInput("INPUT0", [1, 2], "FP32")
        x.set_data_from_numpy(np.array([[i, -i]], dtype=np.float32))
        out = client.infer("identity_fp32", [x]).as_numpy("OUTPUT0")
        assert out.tolist() == [[i, -i]]
    client.close()
    served = [stats(r, "identity_fp32")[0] - b for r, b in zip(replicas, before)]
    print(f"\nstateless {proto.__name__.split('.')[-1]}: served per replica {served}")
    assert sum(served) == sent
    assert all(n >= sent // 10 for n in served), f"not spread over all three: {served}"


def test_rolling_restart_of_one_replica_under_conversation_load(cluster):
    replicas, lb = cluster
    stop = threading.Event()
    lock = threading.Lock()
    counts = {"conversations": 0, "turns": 0, "failed_turns": 0, "failed_new": 0, "retried_starts": 0}
    errors, retried = [], []
    next_id = [3_000_000]

    def new_id():
        with lock:
            next_id[0] += 1
            return next_id[0]

    def worker(proto, seed):
        client = client_for(proto, lb)
        rng = random.Random(seed)
        while not stop.is_set():
            # A new conversation: a START refused with UNAVAILABLE (nothing ran: a draining or
            # down replica, one still loading; over HTTP nginx has tried the next replicas of the
            # ring already) is retried under a new sequence id, which hashes elsewhere.
            for attempt in range(20):
                seq, total = new_id(), 0
                try:
                    v = rng.randint(1, 9)
                    total = turn(client, proto, seq, v, start=True)
                    break
                except InferenceServerException as e:
                    with lock:
                        counts["retried_starts"] += 1
                        retried.append((e.status(), e.message()[:160]))
                    if attempt == 19 or e.status() not in ("StatusCode.UNAVAILABLE", "503"):
                        with lock:
                            counts["failed_new"] += 1
                            errors.append(("start", seq, e.status(), e.message()))
                        total = None
                        break
                    time.sleep(0.05)
            if total is None:
                continue
            # Short and long conversations (the long ones are live through the drain).
            turns = rng.choice([3, 5, 30])
            for t in range(turns):
                v = rng.randint(1, 9)
                try:
                    got = turn(client, proto, seq, v, end=t == turns - 1)
                    total += v
                    ok = got == total
                except InferenceServerException as e:
                    ok = False
                    errors.append(("turn", seq, e.status(), e.message()))
                with lock:
                    counts["turns"] += 1
                    if not ok:
                        counts["failed_turns"] += 1
                if not ok:
                    break
                time.sleep(0.02)
            with lock:
                counts["conversations"] += 1
        client.close()

    threads = [threading.Thread(target=worker, args=(p, i)) for i, p in
               enumerate([httpclient, grpcclient] * 4)]
    for t in threads:
        t.start()
    try:
        time.sleep(1)
        victim = replicas[0]
        # SIGTERM while the replica holds conversations (the drain has something to keep).
        wait_until(lambda: live_sequences(victim) >= 2, timeout=30, what="live conversations on replica 0")
        sent = time.monotonic()
        victim.proc.send_signal(signal.SIGTERM)
        code = victim.proc.wait(timeout=40)
        drained_in = time.monotonic() - sent
        log = victim.log_tail(20000)
        assert code == 0, log
        # Back on the same ports, as a restarted pod behind the same address.
        fresh = Server(victim.repo, log_dir=victim.log_path.parent, exit_timeout_secs=30)
        fresh.http_port, fresh.grpc_port, fresh.metrics_port = victim.http_port, victim.grpc_port, victim.metrics_port
        fresh.log_path = victim.log_path.with_name(victim.log_path.stem + "-restarted.log")
        replicas[0] = fresh.start()
        time.sleep(2)
    finally:
        stop.set()
        for t in threads:
            t.join(timeout=60)
    drain_lines = [l for l in log.splitlines() if "drain" in l]
    print(f"\nrolling restart: {counts}, replica 0 drained and exited in {drained_in:.1f}s; {drain_lines}; "
          f"starts the client retried: {sorted(set(retried))[:6]}")
    assert counts["failed_turns"] == 0, errors[:5]
    assert counts["failed_new"] == 0, errors[:5]
    assert counts["conversations"] > 20, counts
    assert any("drain done" in l for l in drain_lines), drain_lines
    # The restarted replica took conversations again in the two seconds after it came back.
    assert stats(replicas[0], "accumulate")[0] > 0, "the restarted replica serves again"
