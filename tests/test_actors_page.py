"""The live actor tree, `GET /v2/actors`, and its page, `GET /actors`, on the metrics port (issue
29): after real load on a sequence model, a dynamically batched model and an ensemble, every
figure of the tree equals what /metrics and the statistics extension say of the same actors; an
instance killed for real shows its restart by cause; bad query parameters get a 400 with Triton's
`{"error": ...}`; `--allow-actors-page=false` takes both off while /metrics stays; the page is
self-contained (no address outside the server), and Debian's chromium, headless, draws the tree
with the same numbers and highlights a restart. The live conversations' table
(`/v2/actors/conversations`) pages, sorts and searches what the sequence actor holds; the
`actors` restricted-API category guards every path of it; each instance shows the batch it runs
now and ran last."""
import json
import re
import shutil
import threading
import subprocess
import time
from html.parser import HTMLParser

import pytest
import requests

import numpy as np
import tritonclient.http as httpclient

from helpers import wait_until
from test_actor_metrics import ACC_STATE_BYTES, acc_step, pipeline
from test_metrics import all_stats, scrape


CHROMIUM = shutil.which("chromium")
needs_chromium = pytest.mark.skipif(CHROMIUM is None, reason="no chromium (scripts/install_chromium.sh installs it)")


def dump_dom(srv) -> str:
    """The page as headless chromium leaves it after 4 s of its (virtual) time: a few polls (with
    `?follow=poll`: virtual time never runs out while the default event stream is open)."""
    out = subprocess.run(
        [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
         "--virtual-time-budget=4000", "--dump-dom", f"http://127.0.0.1:{srv.metrics_port}/actors?follow=poll"],
        capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    return out.stdout


class Figures(HTMLParser):
    """Per model section: its classes, and each `data-figure` element's (text, classes), per
    instance row (or None)."""

    def __init__(self):
        super().__init__()
        self.models, self.model, self.instance, self.open = {}, None, None, None
        self.conversations, self.range, self.cell = [], {}, None

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "tr" and "data-id" in a:
            self.conversations.append([a["data-id"]])
        if tag == "td" and self.conversations and self.instance is None and self.model is None:
            self.cell = self.conversations[-1]
        if a.get("id") == "conv-range":
            self.range = a
        if tag == "section" and "data-model" in a:
            self.model = self.models.setdefault(a["data-model"], {"class": a.get("class", ""), "figures": {}})
        if tag == "tr":
            self.instance = a.get("data-instance")
        if "data-figure" in a and self.model is not None:
            self.open = ((self.instance, a["data-figure"]), a.get("class", ""))

    def handle_endtag(self, tag):
        if tag == "tr":
            self.instance = None
        if tag == "td":
            self.cell = None
        if tag == "section":
            self.model = None

    def handle_data(self, data):
        if self.cell is not None:
            self.cell.append(data)
        if self.open is not None:
            key, cls = self.open
            self.model["figures"][key] = (data, cls)
            self.open = None


def page_figures(srv, whole=False):
    p = Figures()
    p.feed(dump_dom(srv))
    return p if whole else p.models


def actors(srv, query="", status=200):
    r = requests.get(f"http://127.0.0.1:{srv.metrics_port}/v2/actors{query}", timeout=10)
    assert r.status_code == status, r.text
    assert r.headers["Content-Type"].startswith("application/json"), r.headers
    return r.json()


def by_name(tree):
    return {(m["name"], m["version"]): m for m in tree["models"]}


def conversations(srv, query, status=200, headers=None):
    r = requests.get(f"http://127.0.0.1:{srv.metrics_port}/v2/actors/conversations?{query}", timeout=10,
                     headers=headers)
    assert r.status_code == status, r.text
    assert r.headers["Content-Type"].startswith("application/json"), r.headers
    return r.json()


def fresh_conversations(srv, query):
    """A page read after the sequence actor's last answer has aged out (it serves a second)."""
    time.sleep(1.1)
    return conversations(srv, query)


def oldest_turn(client, seq, v, start=False, end=False):
    inp = httpclient.InferInput("INPUT", [1, 1], "INT32")
    inp.set_data_from_numpy(np.array([[v]], dtype=np.int32))
    res = client.infer("accumulate_oldest", [inp], sequence_id=seq, sequence_start=start, sequence_end=end)
    return int(res.as_numpy("OUTPUT")[0][0])


@pytest.fixture(scope="module")
def srv(tmp_path_factory):
    from helpers import Server, copy_bundled_repo
    base = tmp_path_factory.mktemp("actors")
    repo = copy_bundled_repo(base / "models", ["accumulate", "accumulate_oldest", "add_sub", "identity_fp32",
                                               "add_sub_pipeline"])
    s = Server(repo, log_dir=base).start()
    yield s
    assert s.stop() == 0, s.log_tail()


def test_the_tree_agrees_with_metrics_and_statistics_after_load(srv):
    c = srv.client
    for seq in (21, 22, 23):  # three live conversations, left open
        assert acc_step(c, seq, seq, start=True) == seq
        assert acc_step(c, seq, 1) == seq + 1
    for i in range(7):
        pipeline(c, i)
    tree, m, stats = actors(srv), scrape(srv), all_stats(srv)
    models = by_name(tree)
    assert set(models) == {(n, "1") for n in ("accumulate", "accumulate_oldest", "add_sub", "identity_fp32",
                                              "add_sub_pipeline")}
    for (name, version), t in models.items():
        l = {"model": name, "version": version}
        st = stats[(name, version)]
        assert t["statistics"]["success"] == int(st["inference_stats"]["success"]["count"])
        assert t["statistics"]["execution_count"] == int(st["execution_count"])
        assert t["statistics"]["inference_count"] == int(st["inference_count"])
        assert t["statistics"]["success"] == m["nv_inference_request_success"].value(**l)
        s = t["scheduler"]
        assert s["pending"] == m["nv_inference_pending_request_count"].value(**l) == 0
        assert s["batches"] == m["tritium_batcher_batches_total"].value(**l)
        assert s["items"] == m["tritium_batcher_items_total"].value(**l)
        hist = m["tritium_batcher_batch_size"]
        assert s["batch_size"]["count"] == hist.value("_count", **l) == s["batches"]
        assert s["batch_size"]["sum"] == hist.value("_sum", **l) == s["items"]
        for b in s["batch_size"]["buckets"]:
            assert b["count"] == hist.value("_bucket", le=f"{b['le']:g}", **l), b
        sup = t["supervisor"]
        assert sup["live_instances"] == sup["instances"] == len(t["instances"])
        assert sup["restarts"]["total"] == 0
        for inst in t["instances"]:
            il = {"instance": inst["name"], **l}
            assert inst["state"] == "READY" and inst["alive"]
            assert inst["executions"] == m["tritium_instance_executions_total"].value(**il)
            assert inst["mailbox"] == m["tritium_instance_mailbox_depth"].value(**il)
            assert inst["busy_us"] == m["tritium_instance_busy_us"].value(**il)
            for cause in ("load_failed", "backend_failed", "panicked"):
                assert inst["restarts"][cause] == m["tritium_instance_restarts_total"].value(cause=cause, **il) == 0
    acc = models[("accumulate", "1")]
    assert acc["scheduler_kind"] == "sequence_batcher"
    q = acc["sequence"]
    labels = {"model": "accumulate", "version": "1"}
    assert q["strategy"] == "direct" and q["slots"] == 2 * 4  # 2 instances x max_batch_size 4
    assert q["live"] == 3 == m["tritium_sequence_active"].value(**labels)
    assert q["backlog"] == 0 == m["tritium_sequence_backlog"].value(**labels)
    assert q["state_bytes"] == 3 * ACC_STATE_BYTES == m["tritium_sequence_state_bytes"].value(**labels)
    assert sum(q["slots_used"]) == 3
    assert [i["sequence_slots_used"] for i in acc["instances"]] == q["slots_used"]
    assert models[("add_sub", "1")]["sequence"] is None
    ens = models[("add_sub_pipeline", "1")]
    assert ens["scheduler_kind"] == "ensemble"
    steps = ens["ensemble"]["steps"]
    assert [(s["step"], s["model"], s["latency_us"]["count"]) for s in steps] == [
        (1, "add_sub", 7), (2, "identity_fp32", 7)]
    step_hist = m["tritium_ensemble_step_duration_us"]
    for s in steps:
        assert s["latency_us"]["sum"] == step_hist.value("_sum", model="add_sub_pipeline", version="1",
                                                         step=str(s["step"]), step_model=s["model"])
    for seq in (21, 22, 23):
        acc_step(c, seq, 0, end=True)
    q = by_name(actors(srv, "?model=accumulate"))[("accumulate", "1")]["sequence"]
    assert q["live"] == 0 and q["state_bytes"] == 0 and sum(q["slots_used"]) == 0


def test_busy_shares_cover_the_last_second_and_minute(srv):
    # The sampler takes a sample every 250 ms: after a second and a half both windows have one.
    time.sleep(1.5)
    for inst in by_name(actors(srv))[("add_sub", "1")]["instances"]:
        for w in ("busy_share_1s", "busy_share_60s"):
            assert inst[w] is not None and 0.0 <= inst[w] <= 1.0, inst
    # Idle for over a second: the last second's share is back to 0.
    time.sleep(1.5)
    assert all(i["busy_share_1s"] == 0 for i in by_name(actors(srv))[("add_sub", "1")]["instances"])


def test_the_filter_picks_one_model_and_bad_parameters_get_a_400(srv):
    tree = actors(srv, "?model=identity_fp32&version=1")
    assert [(m["name"], m["version"]) for m in tree["models"]] == [("identity_fp32", "1")]
    for query, says in [
        ("?modle=x", "unknown query parameter 'modle'"),
        ("?model=add_sub&version=latest", "'version' must be a positive integer, got 'latest'"),
        ("?model=add_sub&model=accumulate", "'model' given more than once"),
        ("?version=1", "'version' needs 'model'"),
        ("?model=nope", "unknown model: 'nope'"),
        ("?model=add_sub&version=7", "unknown model: 'add_sub' version 7"),
    ]:
        body = actors(srv, query, status=400)
        assert set(body) == {"error"} and says in body["error"], (query, body)
    # The server is none the worse.
    assert actors(srv)["models"]


def test_the_page_is_served_whole_from_the_binary(srv):
    base = f"http://127.0.0.1:{srv.metrics_port}"
    page = requests.get(f"{base}/actors", timeout=10)
    assert page.status_code == 200 and page.headers["Content-Type"].startswith("text/html"), page.headers
    assert '<script src="/actors/page.js">' in page.text and 'href="/actors/page.css"' in page.text
    for path, kind in (("/actors/page.js", "text/javascript"), ("/actors/page.css", "text/css")):
        r = requests.get(base + path, timeout=10)
        assert r.status_code == 200 and r.headers["Content-Type"].startswith(kind), (path, r.headers)
        assert not re.search(r"https?://", r.text), f"{path} must not load anything from elsewhere"
    js = requests.get(f"{base}/actors/page.js", timeout=10).text
    assert 'new EventSource("/v2/actors/events")' in js, "follows the tree's events"
    assert 'fetch("/v2/actors"' in js and "fetch(url" in js, "polls the tree (?follow=poll) and the table"
    assert not re.search(r"(src|href)=\"(https?:)?//", page.text)


@needs_chromium
def test_a_real_browser_draws_the_tree_with_the_endpoints_numbers(srv):
    c = srv.client
    for seq in (31, 32):  # two live conversations during the page's polls
        acc_step(c, seq, 5, start=True)
    chats = list(range(501, 531))  # and 30 on accumulate_oldest: more than the table's page of 25
    for seq in chats:
        oldest_turn(c, seq, 1, start=True)
    for i in range(3):
        pipeline(c, i)
    whole = page_figures(srv, whole=True)
    page = whole.models
    tree, m = by_name(actors(srv)), scrape(srv)
    # The table shows the busiest sequence model, first page of 25 by id, as the endpoint does.
    assert whole.range.get("data-model") == "accumulate_oldest", whole.range
    assert (whole.range["data-total"], whole.range["data-matched"]) == ("30", "30"), whole.range
    table = conversations(srv, "model=accumulate_oldest&limit=25")
    assert [row[0] for row in whole.conversations] == [r["id"] for r in table["conversations"]]
    assert [row[0] for row in whole.conversations] == [str(s) for s in chats[:25]]
    for row in whole.conversations:  # data-id, then id, instance/slot, status, turns, queued, state bytes
        assert row[1:7] == [row[0], "–", "idle", "1", "0", str(ACC_STATE_BYTES)], row
    assert set(page) == {n for n, _ in tree}, page.keys()
    for (name, _), t in tree.items():
        f = page[name]["figures"]
        assert "flagged" not in page[name]["class"].split(), (name, page[name])
        assert f[(None, "success")][0] == str(t["statistics"]["success"])
        assert f[(None, "batches")][0] == str(t["scheduler"]["batches"])
        assert f[(None, "restarts")] == ("0", "")
        assert f[(None, "live")][0] == f"{len(t['instances'])}/{len(t['instances'])} live"
        for inst in t["instances"]:
            l = {"model": name, "version": "1", "instance": inst["name"]}
            assert f[(inst["name"], "executions")][0] == str(inst["executions"])
            assert int(f[(inst["name"], "executions")][0]) == m["tritium_instance_executions_total"].value(**l)
    live = page["accumulate"]["figures"][(None, "live_sequences")][0]
    assert live == "2/8" and m["tritium_sequence_active"].value(model="accumulate", version="1") == 2, live
    for inst in tree[("add_sub", "1")]["instances"]:  # idle now: no batch running, its last one
        assert inst["last_batch_size"] == 1 and not inst["executing"], inst
        assert page["add_sub"]["figures"][(inst["name"], "batch_size")][0] == "0 / 1"
    for seq in (31, 32):
        acc_step(c, seq, 0, end=True)
    for seq in chats:
        oldest_turn(c, seq, 0, end=True)


def test_the_flag_turns_the_tree_and_page_off_and_metrics_stay(start_server, repo_copy):
    srv = start_server(repo_copy(["add_sub"]), args=["--allow-actors-page=false"])
    base = f"http://127.0.0.1:{srv.metrics_port}"
    for path in ("/v2/actors", "/actors", "/actors/page.js"):
        assert requests.get(base + path, timeout=10).status_code == 404, path
    assert requests.get(srv.metrics_url, timeout=10).status_code == 200


def test_a_restart_shows_by_cause_in_the_tree_and_in_metrics(tmp_path):
    """The `errors` Python model's MODE 9 exits its stub process: the supervisor restarts the
    instance (cause backend_failed)."""
    pb = pytest.importorskip("test_python_backend")
    from helpers import Server
    shutil.copytree(pb.MODELS / "errors", tmp_path / "models" / "errors")
    srv = Server(tmp_path / "models", log_dir=tmp_path, env=pb.stub_env()).start(timeout=120)
    try:
        crash = {"inputs": [{"name": "MODE", "datatype": "INT32", "shape": [1], "data": [9]}]}
        assert requests.post(f"{srv.base}/v2/models/errors/infer", json=crash, timeout=60).status_code == 500

        def restarted():
            t = by_name(actors(srv))[("errors", "1")]
            return t["supervisor"]["restarts"]["total"] >= 1 and t["supervisor"]["live_instances"] == 1

        wait_until(restarted, timeout=60, what="the instance restarted")
        t = by_name(actors(srv))[("errors", "1")]
        m = scrape(srv)
        inst = t["instances"][0]
        l = {"model": "errors", "version": "1", "instance": inst["name"]}
        for cause in ("load_failed", "backend_failed", "panicked"):
            assert inst["restarts"][cause] == m["tritium_instance_restarts_total"].value(cause=cause, **l)
            assert t["supervisor"]["restarts"][cause] == inst["restarts"][cause]
        assert inst["restarts"]["backend_failed"] >= 1, inst
        if CHROMIUM is not None:  # the page highlights it
            page = page_figures(srv)["errors"]
            assert "flagged" in page["class"].split(), page
            text, cls = page["figures"][(inst["name"], "restarts")]
            assert text.startswith(f"{inst['restarts']['total']} (") and "alert" in cls, page
            text, cls = page["figures"][(None, "backend_failed")]
            assert text == str(t["supervisor"]["restarts"]["backend_failed"]) and "alert" in cls, page
    finally:
        assert srv.stop() == 0, srv.log_tail()


def test_the_conversation_table_pages_sorts_and_searches_the_live_conversations(srv):
    c = srv.client
    ids = list(range(201, 207))
    for k, seq in enumerate(ids):  # conversation 201 has had 1 turn, 206 has had 6
        oldest_turn(c, seq, seq, start=True)
        for _ in range(k):
            oldest_turn(c, seq, 1)
    time.sleep(0.05)
    oldest_turn(c, 203, 1)  # the most recently active: 203 (now 4 turns)
    turns = {201: 1, 202: 2, 203: 4, 204: 4, 205: 5, 206: 6}
    page = fresh_conversations(srv, "model=accumulate_oldest&sort=turns&order=desc&limit=100")
    tree = by_name(actors(srv, "?model=accumulate_oldest"))[("accumulate_oldest", "1")]
    assert page["total"] == page["matched"] == tree["sequence"]["live"] == 6, page
    assert (page["model"], page["version"], page["sort"], page["order"]) == ("accumulate_oldest", "1", "turns", "desc")
    rows = page["conversations"]
    # Ties (203 and 204, four turns each) by id, ascending.
    assert [(r["id"], r["turns"]) for r in rows] == [(str(i), turns[i]) for i in (206, 205, 203, 204, 202, 201)]
    for r in rows:
        assert r["id_type"] == "uint64" and r["status"] == "idle" and r["queued"] == 0, r
        assert r["state_bytes"] == ACC_STATE_BYTES and r["idle_us"] > 0, r
        # The oldest strategy holds no slot: a conversation runs wherever an instance is free.
        assert r["slot"] is None and r["instance"] is None, r
    assert sum(r["state_bytes"] for r in rows) == tree["sequence"]["state_bytes"]
    # Paging: two at a time, by id.
    seen = []
    for offset in (0, 2, 4, 6):
        p = conversations(srv, f"model=accumulate_oldest&version=1&limit=2&offset={offset}")
        assert p["offset"] == offset and p["limit"] == 2 and p["total"] == 6
        seen += [r["id"] for r in p["conversations"]]
    assert seen == [str(i) for i in ids]
    # Idle: 203 was the last to run.
    p = conversations(srv, "model=accumulate_oldest&sort=idle&limit=1")
    assert [r["id"] for r in p["conversations"]] == ["203"], p
    assert conversations(srv, "model=accumulate_oldest&sort=idle&order=desc&limit=1")["conversations"][0]["id"] != "203"
    # Searching by id: a substring of its text.
    p = conversations(srv, "model=accumulate_oldest&q=20")
    assert p["matched"] == 6
    p = conversations(srv, "model=accumulate_oldest&q=05")
    assert (p["matched"], [r["id"] for r in p["conversations"]]) == (1, ["205"])
    assert conversations(srv, "model=accumulate_oldest&q=999")["conversations"] == []
    # The direct strategy: each conversation on its instance's slot, as the tree counts them.
    for seq in (301, 302, 303):
        acc_step(c, seq, 1, start=True)
    p = fresh_conversations(srv, "model=accumulate&sort=instance")
    acc = by_name(actors(srv, "?model=accumulate"))[("accumulate", "1")]
    names = [i["name"] for i in acc["instances"]]
    per_instance = [sum(1 for r in p["conversations"] if r["instance"] == n) for n in names]
    assert p["total"] == 3 and per_instance == acc["sequence"]["slots_used"], (p, acc)
    for r in p["conversations"]:
        assert r["instance_index"] == names.index(r["instance"]) and 0 <= r["slot"] < 4, r
    assert len({(r["instance"], r["slot"]) for r in p["conversations"]}) == 3
    # Ended conversations leave the table.
    for seq in (301, 302, 303):
        acc_step(c, seq, 0, end=True)
    for seq in ids:
        oldest_turn(c, seq, 0, end=True)
    assert fresh_conversations(srv, "model=accumulate_oldest")["total"] == 0
    assert conversations(srv, "model=accumulate")["total"] == 0


def test_the_sequence_actor_is_asked_at_most_once_a_second(srv):
    c = srv.client
    oldest_turn(c, 401, 1, start=True)
    first = fresh_conversations(srv, "model=accumulate_oldest")
    assert first["total"] == 1 and first["age_ms"] < 500, first
    oldest_turn(c, 402, 1, start=True)
    # Within the second: the same answer, older; then a new one that sees 402.
    again = conversations(srv, "model=accumulate_oldest")
    if again["age_ms"] < 1000:
        assert again["total"] == 1, again
    assert fresh_conversations(srv, "model=accumulate_oldest")["total"] == 2
    for seq in (401, 402):
        oldest_turn(c, seq, 0, end=True)


def test_bad_conversation_queries_get_a_400(srv):
    for query, says in [
        ("", "'model' is required"),
        ("model=accumulate&limit=0", "'limit' must be an integer from 1 to 1000, got '0'"),
        ("model=accumulate&limit=5000", "from 1 to 1000"),
        ("model=accumulate&offset=-3", "'offset' must be an integer"),
        ("model=accumulate&sort=name", "'sort' must be one of id, instance, turns, state_bytes, idle"),
        ("model=accumulate&order=sideways", "'order' must be 'asc' or 'desc'"),
        ("model=accumulate&page=2", "unknown query parameter 'page'"),
        ("model=accumulate&q=a&q=b", "'q' given more than once"),
        ("model=nope", "unknown model: 'nope'"),
        ("model=accumulate&version=9", "unknown model: 'accumulate' version 9"),
        ("model=add_sub", "has no sequence batcher"),
    ]:
        body = conversations(srv, query, status=400)
        assert set(body) == {"error"} and says in body["error"], (query, body)
    assert conversations(srv, "model=accumulate")["total"] >= 0


def test_the_actors_category_restricts_the_tree_the_table_and_the_page(start_server, repo_copy):
    srv = start_server(repo_copy(["accumulate", "add_sub"]), args=["--http-restricted-api=actors:admin-key=s3cret"])
    base = f"http://127.0.0.1:{srv.metrics_port}"
    paths = ("/v2/actors", "/v2/actors/conversations?model=accumulate", "/v2/actors/events", "/actors",
             "/actors/page.js", "/actors/page.css")
    for path in paths:
        for headers in ({}, {"admin-key": "wrong"}, {"other": "s3cret"}):
            r = requests.get(base + path, headers=headers, timeout=10)
            assert r.status_code == 403, (path, headers, r.status_code)
            assert r.json() == {"error": "This API is restricted, expecting header 'admin-key'"}, r.text
        with requests.get(base + path, headers={"Admin-Key": "s3cret"}, timeout=10, stream=True) as r:
            assert r.status_code == 200, path
    # Only the actor page is restricted: metrics and the HTTP port's APIs are not.
    assert requests.get(f"{base}/metrics", timeout=10).status_code == 200
    assert requests.get(f"{srv.base}/v2/models/add_sub", timeout=10).status_code == 200
    assert requests.get(f"{srv.base}/v2/actors", headers={"admin-key": "s3cret"}, timeout=10).status_code == 404


def test_each_instance_shows_the_batch_it_runs_and_ran_last(tmp_path):
    """The Python `batched` model (max_batch_size 8) sleeps 0.3 s on a batch holding X=100: a
    request of one item, then one of four items, each seen while it runs."""
    pb = pytest.importorskip("test_python_backend")
    from helpers import Server
    shutil.copytree(pb.MODELS / "batched", tmp_path / "models" / "batched")
    srv = Server(tmp_path / "models", log_dir=tmp_path, env=pb.stub_env()).start(timeout=120)
    try:
        def instance():
            (inst,) = by_name(actors(srv, "?model=batched"))[("batched", "1")]["instances"]
            return inst

        assert (instance()["current_batch_size"], instance()["last_batch_size"]) == (0, 0)
        url = f"{srv.base}/v2/models/batched/infer"
        for xs in ([100], [100, 1, 2, 3]):
            body = {"inputs": [{"name": "X", "datatype": "INT32", "shape": [len(xs), 1], "data": xs}]}
            answer = []
            sender = threading.Thread(target=lambda: answer.append(requests.post(url, json=body, timeout=60)))
            sender.start()
            running = wait_until(lambda: (lambda i: i if i["executing"] else None)(instance()), timeout=10,
                                 interval=0.01, what="the batch runs")
            sender.join()
            assert running["current_batch_size"] == running["last_batch_size"] == len(xs), running
            assert answer[0].status_code == 200, answer[0].text
            done = instance()
            assert (done["executing"], done["current_batch_size"], done["last_batch_size"]) == (False, 0, len(xs))
        sched = by_name(actors(srv, "?model=batched"))[("batched", "1")]["scheduler"]
        assert (sched["batches"], sched["items"]) == (2, 5), sched
        # Each found the model idle with nothing else in flight: straight from the HTTP worker
        # to the instance, without the batcher's 200 ms delay.
        assert (sched["direct"], sched["pulled"], sched["lane_queued"]) == (2, 0, 0), sched
    finally:
        assert srv.stop() == 0, srv.log_tail()


def read_events(srv, query="", count=2, timeout=10):
    """The first `count` events of /v2/actors/events, as (name, JSON data, arrival time)."""
    url = f"http://127.0.0.1:{srv.metrics_port}/v2/actors/events{query}"
    out = []
    with requests.get(url, stream=True, timeout=timeout) as r:
        assert r.status_code == 200 and r.headers["Content-Type"] == "text/event-stream", (r.status_code, r.headers)
        name = None
        for line in r.iter_lines(decode_unicode=True):
            if line.startswith("event: "):
                name = line[len("event: "):]
            elif line.startswith("data: "):
                out.append((name, json.loads(line[len("data: "):]), time.monotonic()))
                if len(out) == count:
                    break
    return out


def test_the_tree_streams_as_server_sent_events_once_a_second(srv):
    c = srv.client
    oldest_turn(c, 601, 1, start=True)
    events = read_events(srv, "?model=accumulate_oldest", count=3)
    assert [e[0] for e in events] == ["tree"] * 3, events
    for _, tree, _ in events:
        assert [(m["name"], m["version"]) for m in tree["models"]] == [("accumulate_oldest", "1")]
        assert tree["models"][0]["sequence"]["live"] == 1
    gaps = [b[2] - a[2] for a, b in zip(events, events[1:])]
    assert all(0.7 < g < 3 for g in gaps), gaps
    assert events[1][1]["timestamp_ms"] > events[0][1]["timestamp_ms"]
    # Unfiltered, the same models as GET /v2/actors.
    (_, tree, _), = read_events(srv, count=1)
    assert {(m["name"], m["version"]) for m in tree["models"]} == set(by_name(actors(srv)))
    # A bad filter is refused before any stream starts.
    for query, says in [("?model=nope", "unknown model: 'nope'"), ("?modle=x", "unknown query parameter")]:
        r = requests.get(f"http://127.0.0.1:{srv.metrics_port}/v2/actors/events{query}", timeout=10)
        assert r.status_code == 400 and says in r.json()["error"], r.text
    oldest_turn(c, 601, 0, end=True)
