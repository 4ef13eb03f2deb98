"""The actor page (`/actors`, issue 29) driven in a real browser: Debian's chromium, headless, under
Debian's chromedriver and the `selenium` package (nothing downloaded: the driver's path is given and
Selenium Manager stays offline). Against a server under conversation load from background client
threads, the page's numbers change between two looks; once the load stops they equal
`/v2/actors` and `/metrics`; the conversations table's paging buttons, sortable columns and id
search change the rows exactly as `/v2/actors/conversations` says; a conversation evicted by
`max_sequence_state_bytes` is highlighted. With ACTORS_PAGE_SCREENSHOT=<path> the live test also
writes the page's screenshot there (docs/actors-page.png is made that way)."""
import os
import shutil
import threading
import time

import numpy as np
import pytest
import requests
import tritonclient.http as httpclient

from helpers import wait_until
from test_metrics import scrape

CHROMIUM = shutil.which("chromium")
CHROMEDRIVER = shutil.which("chromedriver")
try:
    import selenium  # noqa: F401
except ImportError:
    selenium = None
pytestmark = pytest.mark.skipif(
    CHROMIUM is None or CHROMEDRIVER is None or selenium is None,
    reason="needs chromium, chromedriver (scripts/install_chromium.sh) and selenium (tests/requirements.txt)")

ROWS = 25  # the page's table shows 25 conversations at a time
CONVERSATIONS = 60  # 3 client threads x 20 conversations, all left open when the load stops
STATE_BYTES = 4


@pytest.fixture(scope="module")
def browser():
    os.environ["SE_OFFLINE"] = "true"  # Selenium Manager must never fetch a driver or a browser
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service
    opts = webdriver.ChromeOptions()
    opts.binary_location = CHROMIUM
    for a in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
              "--disable-background-networking", "--window-size=1300,1900"):
        opts.add_argument(a)
    driver = webdriver.Chrome(service=Service(executable_path=CHROMEDRIVER), options=opts)
    driver.set_page_load_timeout(60)
    yield driver
    driver.quit()


def model_copy(repo, source, name, replace=(), extra=""):
    """`source` of the repository copied as `name`, its config edited."""
    config = (repo / source / "config.pbtxt").read_text().replace(f'name: "{source}"', f'name: "{name}"')
    for old, new in replace:
        assert old in config, old
        config = config.replace(old, new)
    (repo / name / "1").mkdir(parents=True)
    (repo / name / "1" / "model.onnx").write_bytes((repo / source / "1" / "model.onnx").read_bytes())
    (repo / name / "config.pbtxt").write_text(config + extra)


def section(driver, model):
    """A model's section of the page: its classes and every `data-figure` as (text, classes),
    keyed `figure` or `instance/figure`; None while the page has not drawn it."""
    return driver.execute_script("""
        const s = document.querySelector(`section[data-model="${arguments[0]}"]`);
        if (!s) return null;
        const figures = {};
        for (const e of s.querySelectorAll("[data-figure]")) {
          const tr = e.closest("tr[data-instance]");
          figures[(tr ? tr.dataset.instance + "/" : "") + e.dataset.figure] = [e.textContent, e.className];
        }
        return {class: s.className, figures};""", model)


def table(driver):
    """The conversations panel as shown: its range line, the rows' ids, the sorted column."""
    return driver.execute_script("""
        const r = document.getElementById("conv-range");
        const sorted = document.querySelector("#conv-table th[class^=sorted-]");
        return {range: r.textContent, model: r.dataset.model || null, total: r.dataset.total || null,
                matched: r.dataset.matched || null,
                ids: [...document.querySelectorAll("#conv-table tbody tr")].map((t) => t.dataset.id),
                prev_disabled: document.getElementById("conv-prev").disabled,
                next_disabled: document.getElementById("conv-next").disabled,
                sorted: sorted ? [sorted.dataset.sort, sorted.className] : null};""")


def endpoint(srv, path):
    r = requests.get(f"http://127.0.0.1:{srv.metrics_port}{path}", timeout=10)
    assert r.status_code == 200, r.text
    return r.json()


def endpoint_ids(srv, query):
    return [c["id"] for c in endpoint(srv, f"/v2/actors/conversations?model=chat&{query}")["conversations"]]


def shows(driver, srv, query, what):
    """Waits until the table shows what the endpoint answers to `query`, and returns it."""
    def same():
        ids = endpoint_ids(srv, query)
        shown = table(driver)
        return shown if shown["ids"] == ids and ids else None
    return wait_until(same, timeout=30, interval=0.2, what=what)


class Load:
    """Background clients: each thread opens its 20 conversations on `chat`, then sends turns
    round after round (conversation k of a thread every (k % 4) + 1 rounds) until stopped; none
    is ended, so all stay live."""

    def __init__(self, srv, threads=3, each=CONVERSATIONS // 3):
        self.srv, self.stop_flag, self.errors, self.sent = srv, threading.Event(), [], [0] * threads
        self.threads = [threading.Thread(target=self.run, args=(t, [100 + t * each + k for k in range(each)]))
                        for t in range(threads)]

    def run(self, t, ids):
        client = httpclient.InferenceServerClient(self.srv.http_url)
        try:
            def turn(seq, start=False):
                inp = httpclient.InferInput("INPUT", [1, 1], "INT32")
                inp.set_data_from_numpy(np.array([[1]], dtype=np.int32))
                client.infer("chat", [inp], sequence_id=seq, sequence_start=start)
                self.sent[t] += 1
            for seq in ids:
                turn(seq, start=True)
            rnd = 0
            while not self.stop_flag.is_set():
                rnd += 1
                for k, seq in enumerate(ids):
                    if rnd % (k % 4 + 1) == 0 and not self.stop_flag.is_set():
                        turn(seq)
        except Exception as e:  # reported by stop()
            self.errors.append(repr(e))
        finally:
            client.close()

    def __enter__(self):
        for th in self.threads:
            th.start()
        return self

    def stop(self):
        self.stop_flag.set()
        for th in self.threads:
            th.join(timeout=60)
        assert not self.errors, self.errors

    def __exit__(self, *exc):
        self.stop_flag.set()
        for th in self.threads:
            th.join(timeout=60)


def test_the_page_follows_live_load_then_matches_the_endpoint_and_metrics(browser, start_server, repo_copy,
                                                                          tmp_path):
    repo = repo_copy(["accumulate_oldest"])
    # The bundled model drops a conversation idle for 5 s; this copy keeps them for the clicks.
    model_copy(repo, "accumulate_oldest", "chat",
               replace=[("max_sequence_idle_microseconds: 5000000", "max_sequence_idle_microseconds: 600000000")])
    shutil.rmtree(repo / "accumulate_oldest")
    srv = start_server(repo, args=["--metrics-interval-ms", "100"])
    browser.get(f"http://127.0.0.1:{srv.metrics_port}/actors")
    labels = {"model": "chat", "version": "1"}

    def success_shown():
        s = section(browser, "chat")
        return int(s["figures"]["success"][0]) if s else None

    with Load(srv) as load:
        first = wait_until(lambda: (lambda n: n if n and n > 0 else None)(success_shown()), timeout=60,
                           interval=0.2, what="the page shows the first turns")
        # Followed live: a later look shows more, while the clients still send.
        later = wait_until(lambda: (lambda n: n if n > first else None)(success_shown()), timeout=60,
                           interval=0.2, what="the page's success count to grow under load")
        assert not load.stop_flag.is_set() and all(th.is_alive() for th in load.threads)
        assert later > first
        live_table = table(browser)
        load.stop()
    # It followed the event stream (still open, so in no list of finished requests), not polls of
    # the tree: /v2/actors was never fetched, yet the tree was redrawn under load.
    assert browser.execute_script("return document.body.dataset.follow") == "events"
    asked = browser.execute_script(
        "return performance.getEntriesByType('resource').map((e) => new URL(e.name).pathname)")
    assert "/v2/actors" not in asked and "/v2/actors/conversations" in asked, asked
    sent = sum(load.sent)

    # Quiet now: the page's numbers settle on the endpoint's, which are /metrics' numbers.
    def settled():
        tree = endpoint(srv, "/v2/actors?model=chat")["models"][0]
        s = section(browser, "chat")
        return (tree, s) if s and s["figures"]["success"][0] == str(tree["statistics"]["success"]) else None

    tree, shown = wait_until(settled, timeout=30, interval=0.2, what="the page to show the settled tree")
    assert tree["statistics"]["success"] == sent
    m = wait_until(lambda: (lambda m: m if m["tritium_sequence_active"].value(**labels) == CONVERSATIONS else None)(
        scrape(srv)), timeout=10, what="/metrics' gauges to refresh")
    f = shown["figures"]
    assert int(f["success"][0]) == sent == m["nv_inference_request_success"].value(**labels)
    assert int(f["batches"][0]) == tree["scheduler"]["batches"] == m["tritium_batcher_batches_total"].value(**labels)
    assert int(f["items"][0]) == tree["scheduler"]["items"] == m["tritium_batcher_items_total"].value(**labels)
    assert f["pending"][0] == "0" == str(int(m["nv_inference_pending_request_count"].value(**labels)))
    q = tree["sequence"]
    assert f["live_sequences"][0] == f"{CONVERSATIONS}/{q['slots']}" and q["live"] == CONVERSATIONS
    assert f["state_bytes"][0].split(" ")[0] == str(q["state_bytes"]) == str(CONVERSATIONS * STATE_BYTES)
    assert q["state_bytes"] == m["tritium_sequence_state_bytes"].value(**labels)
    assert f["evictions"] == ["0", ""] and "flagged" not in shown["class"].split()
    for inst in tree["instances"]:
        il = {"instance": inst["name"], **labels}
        assert int(f[f"{inst['name']}/executions"][0]) == inst["executions"] == \
            m["tritium_instance_executions_total"].value(**il)
        assert f[f"{inst['name']}/restarts"][0] == "0 (0/0/0)"

    # The table: all 60 conversations, 25 a page, by id.
    by_id = [str(s) for s in range(100, 100 + CONVERSATIONS)]
    t = shows(browser, srv, f"limit={ROWS}", "the first page of conversations")
    assert t["ids"] == by_id[:ROWS] and (t["model"], t["total"], t["matched"]) == ("chat", "60", "60"), t
    assert t["range"] == "1–25 of 60" and t["prev_disabled"] and not t["next_disabled"], t
    assert live_table["model"] == "chat", live_table
    # Paging with the buttons.
    browser.find_element("id", "conv-next").click()
    t = shows(browser, srv, f"limit={ROWS}&offset=25", "the second page")
    assert t["ids"] == by_id[25:50] and t["range"] == "26–50 of 60" and not t["prev_disabled"], t
    browser.find_element("id", "conv-next").click()
    t = shows(browser, srv, f"limit={ROWS}&offset=50", "the last page")
    assert t["ids"] == by_id[50:] and t["range"] == "51–60 of 60" and t["next_disabled"], t
    browser.find_element("id", "conv-prev").click()
    assert shows(browser, srv, f"limit={ROWS}&offset=25", "back to the second page")["ids"] == by_id[25:50]
    # Sorting by a column: most turns first, a second click reverses it; back to the first page.
    browser.find_element("css selector", "#conv-table th[data-sort=turns]").click()
    t = shows(browser, srv, f"limit={ROWS}&sort=turns&order=desc", "sorted by turns, most first")
    assert t["sorted"] == ["turns", "sorted-desc"] and t["ids"] != by_id[:ROWS] and t["prev_disabled"], t
    rows = endpoint(srv, f"/v2/actors/conversations?model=chat&limit={ROWS}&sort=turns&order=desc")["conversations"]
    assert [r["turns"] for r in rows] == sorted((r["turns"] for r in rows), reverse=True) and \
        rows[0]["turns"] > rows[-1]["turns"], rows
    browser.find_element("css selector", "#conv-table th[data-sort=turns]").click()
    t = shows(browser, srv, f"limit={ROWS}&sort=turns&order=asc", "sorted by turns, fewest first")
    assert t["sorted"] == ["turns", "sorted-asc"], t
    # Searching by id: what the endpoint matches with q=, and nothing else.
    browser.find_element("id", "conv-search").send_keys("12")
    t = shows(browser, srv, f"limit={ROWS}&sort=turns&order=asc&q=12", "the conversations whose id holds 12")
    expected = [i for i in by_id if "12" in i]
    assert sorted(t["ids"]) == expected and t["matched"] == str(len(expected)) and t["total"] == "60", t
    assert t["range"] == f"1–{len(expected)} of {len(expected)} (of 60 live)", t
    browser.find_element("id", "conv-search").send_keys("999")
    wait_until(lambda: (lambda t: t if t["ids"] == [] and t["range"] == "none of 60" else None)(table(browser)),
               timeout=30, interval=0.2, what="no conversation matches 12999")
    browser.find_element("id", "conv-search").clear()
    browser.execute_script('document.getElementById("conv-search").dispatchEvent(new Event("input"))')
    browser.find_element("css selector", "#conv-table th[data-sort=id]").click()
    assert shows(browser, srv, f"limit={ROWS}&sort=id&order=asc", "all conversations again")["ids"] == by_id[:ROWS]

    shot = tmp_path / "actors-page.png"
    assert browser.save_screenshot(str(shot)) and shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    if os.environ.get("ACTORS_PAGE_SCREENSHOT"):
        shutil.copyfile(shot, os.environ["ACTORS_PAGE_SCREENSHOT"])


def test_an_eviction_is_highlighted_as_it_happens(browser, start_server, repo_copy):
    """`max_sequence_state_bytes` holds two accumulator states: a third conversation evicts the
    longest idle one, and the open page flags the model and its evictions."""
    repo = repo_copy(["accumulate"])
    model_copy(repo, "accumulate", "acc_cap",
               extra='parameters { key: "max_sequence_state_bytes" value: { string_value: "8" } }\n')
    srv = start_server(repo, args=["--metrics-interval-ms", "100"])
    browser.get(f"http://127.0.0.1:{srv.metrics_port}/actors")
    c = httpclient.InferenceServerClient(srv.http_url)

    def step(seq, start=False):
        inp = httpclient.InferInput("INPUT", [1, 1], "INT32")
        inp.set_data_from_numpy(np.array([[seq]], dtype=np.int32))
        c.infer("acc_cap", [inp], sequence_id=seq, sequence_start=start)

    step(1, start=True)
    step(2, start=True)
    before = wait_until(lambda: (lambda s: s if s and s["figures"]["live_sequences"][0].startswith("2/") else None)(
        section(browser, "acc_cap")), timeout=30, interval=0.2, what="two live conversations on the page")
    assert before["figures"]["evictions"] == ["0", ""] and "flagged" not in before["class"].split(), before
    step(3, start=True)  # over the cap: conversation 1, the longest idle, is evicted
    after = wait_until(lambda: (lambda s: s if s["figures"]["evictions"][0] != "0" else None)(
        section(browser, "acc_cap")), timeout=30, interval=0.2, what="the page to show the eviction")
    labels = {"model": "acc_cap", "version": "1"}
    q = endpoint(srv, "/v2/actors?model=acc_cap")["models"][0]["sequence"]
    m = scrape(srv)
    assert after["figures"]["evictions"] == ["1", "alert"], after
    assert q["evictions"] == 1 == m["tritium_sequence_evictions_total"].value(**labels)
    assert "flagged" in after["class"].split(), after
    assert after["figures"]["live_sequences"][0].startswith("2/") and q["live"] == 2
    ids = [r["id"] for r in endpoint(srv, "/v2/actors/conversations?model=acc_cap&limit=10")["conversations"]]
    assert "1" not in ids, ids
    c.close()
