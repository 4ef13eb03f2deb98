"""An ONNX Runtime instance's thread keeps off the cores ONNX Runtime pinned its pool threads to,
once the pool is seen at work (`src/backends/onnx/placement.rs`). Left with its default thread
count, ONNX Runtime pins one pool thread per core from the second core on and leaves the thread
that calls `Run`, the instance's, to the kernel, which often put it on its own pool thread's
core. Only where the pool threads sleep between parallel sections
(`session.intra_op.allow_spinning` = `0`, as the bundled mlp sets): spinning, they run through
every run, work or not. A small model's runs never reach the pool: its instance's thread stays
free.

The threads are read from /proc: ONNX Runtime's pool threads take the instance thread's name,
and the instance's thread, which made the session, has the lowest id of that name."""

import os
import time

import numpy as np
import pytest
import tritonclient.http as httpclient

from helpers import copy_bundled_repo, Server

CORES = os.sched_getaffinity(0)

pytestmark = pytest.mark.skipif(len(CORES) < 2, reason="ONNX Runtime makes no pool thread on one core")


def threads_named(pid, prefix):
    """{name: [(tid, cores)]} of the process's threads whose name starts with `prefix`, by id."""
    out = {}
    for t in sorted(os.listdir(f"/proc/{pid}/task"), key=int):
        try:
            name = open(f"/proc/{pid}/task/{t}/comm").read().strip()
            cores = os.sched_getaffinity(int(t))
        except OSError:
            continue
        if name.startswith(prefix):
            out.setdefault(name, []).append((int(t), cores))
    return out


def serves_mlp(srv, n=1):
    x = np.random.rand(1, 256).astype(np.float32)
    inp = httpclient.InferInput("INPUT0", [1, 256], "FP32")
    inp.set_data_from_numpy(x)
    for _ in range(n):
        out = srv.client.infer("mlp", [inp]).as_numpy("OUTPUT0")
        assert out.shape == (1, 256)


def serves_add_sub(srv, n):
    a = np.arange(16, dtype=np.float32).reshape(1, 16)
    inputs = [httpclient.InferInput("INPUT0", [1, 16], "FP32"), httpclient.InferInput("INPUT1", [1, 16], "FP32")]
    inputs[0].set_data_from_numpy(a)
    inputs[1].set_data_from_numpy(a)
    for _ in range(n):
        assert (srv.client.infer("add_sub", inputs).as_numpy("OUTPUT0") == 2 * a).all()


SLEEPING_POOL = '\nparameters { key: "session.intra_op.allow_spinning" value: { string_value: "0" } }\n'


def start(tmp_path, edit=None, models=("mlp",), edit_add_sub=None):
    repo = copy_bundled_repo(tmp_path / "models", list(models))
    for model, change in (("mlp", edit), ("add_sub", edit_add_sub)):
        if change is not None:
            cfg = repo / model / "config.pbtxt"
            cfg.write_text(change(cfg.read_text()))
    return Server(repo, log_dir=tmp_path).start()


def pool_of(srv, name):
    """The instance's thread (the lowest id of its name) and its pool threads, with their cores."""
    threads = threads_named(srv.proc.pid, name)[name]
    return threads[0], threads[1:]


def test_the_instance_thread_keeps_to_the_cores_its_pool_leaves_once_the_pool_works(tmp_path):
    # add_sub's pool sleeps too here (the bundled add_sub spins, which leaves its thread alone).
    srv = start(tmp_path, models=("mlp", "add_sub"), edit_add_sub=lambda text: text + SLEEPING_POOL)
    try:
        (_, instance_cores), pool = pool_of(srv, "inst-mlp_0_0")
        if not pool:
            pytest.skip("ONNX Runtime made no pool thread here (one physical core)")
        taken = set()
        for _, cores in pool:
            assert cores < CORES, f"ONNX Runtime pins each pool thread to a core of its own: {pool}"
            taken |= cores
        assert instance_cores == CORES, "free until the pool has worked"
        # mlp's matrix products are split with the pool even for one item: a few hundred runs
        # give it the 20 ms of work that count.
        deadline = time.monotonic() + 60
        while instance_cores == CORES and time.monotonic() < deadline:
            serves_mlp(srv, 64)
            (_, instance_cores), _ = pool_of(srv, "inst-mlp_0_0")
        assert instance_cores == CORES - taken, "the instance keeps to the core(s) the pool leaves"
        assert "instance 'mlp_0_0' runs on cores" in srv.log_path.read_text()

        # add_sub's two small kernels never leave the calling thread: its pool stays idle and
        # its instance's thread free.
        serves_add_sub(srv, 512)
        (_, add_sub_cores), add_sub_pool = pool_of(srv, "inst-add_sub_0_")
        assert add_sub_pool and all(cores < CORES for _, cores in add_sub_pool)
        assert add_sub_cores == CORES
        assert "instance 'add_sub_0" not in srv.log_path.read_text()
    finally:
        srv.stop()


def test_a_spinning_pool_leaves_the_instance_thread_free(tmp_path):
    # Spinning, the pool threads run through every run: their CPU time says nothing of work.
    def spinning(text):
        sleeping = 'allow_spinning" value: { string_value: "0"'
        assert sleeping in text, "the bundled mlp's pool sleeps"
        return text.replace(sleeping, 'allow_spinning" value: { string_value: "1"')

    srv = start(tmp_path, spinning)
    try:
        serves_mlp(srv, 512)
        (_, instance_cores), pool = pool_of(srv, "inst-mlp_0_0")
        if not pool:
            pytest.skip("ONNX Runtime made no pool thread here (one physical core)")
        assert all(cores < CORES for _, cores in pool), pool
        assert instance_cores == CORES
        assert "runs on cores" not in srv.log_path.read_text()
    finally:
        srv.stop()


def test_an_explicit_thread_count_leaves_every_thread_free(tmp_path):
    # With `intra_op_thread_count` set, ONNX Runtime pins nothing, and nor does Tritium.
    srv = start(tmp_path, lambda text: text + '\nparameters { key: "intra_op_thread_count" '
                                             'value: { string_value: "2" } }\n')
    try:
        serves_mlp(srv, 256)
        threads = threads_named(srv.proc.pid, "inst-mlp_0_0")["inst-mlp_0_0"]
        assert len(threads) == 2, threads
        assert all(cores == CORES for _, cores in threads), threads
        assert "runs on cores" not in srv.log_path.read_text()
    finally:
        srv.stop()


def test_two_instances_share_the_cores_unpinned(tmp_path):
    # Two instances split the cores by count (an explicit thread count each): nothing is pinned.
    srv = start(tmp_path, lambda text: text.replace("count: 1", "count: 2"))
    try:
        serves_mlp(srv, 256)
        named = threads_named(srv.proc.pid, "inst-mlp_0_")
        assert set(named) == {"inst-mlp_0_0", "inst-mlp_0_1"}, named
        assert all(cores == CORES for threads in named.values() for _, cores in threads), named
    finally:
        srv.stop()
