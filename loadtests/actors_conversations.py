#!/usr/bin/env python3
"""The conversation table under 10,000 live conversations (issue 29): does asking the sequence
actor for its table cost the engine throughput, and how long does a request for the table or the
tree take? `chatload` keeps N conversations on `accumulate_oldest` (max_candidate_sequences
N + 1, so all N are live at once). A first run offers --probe-rate turns/s for 2 s: it starts
all N conversations and what the server answers per second is its ceiling; every round then
offers 1.25 times that, so the server stays saturated and the turns it answers per second are its
throughput (each conversation has at most one turn in flight, so the excess waits in the load
generator, not in the server's queue). Rounds alternate without and with a watcher that requests
`GET /v2/actors` and `GET /v2/actors/conversations?model=…&sort=idle&order=desc&limit=25`
every --watch-ms (the page does both every 1,000 ms), on the same server in the same run. Every
round reuses the same N sequence ids (each restarts with START), so exactly N stay live.

  .venv/bin/python loadtests/actors_conversations.py [--conversations 10000] [--rounds 3]
      [--duration 10] [--probe-rate 20000] [--watch-ms 250]

Reports per round the turns answered per second, the ratio of the medians (watched /
unwatched), and the p50/p99/max of the watcher's tree and table requests (a table request is
answered from the sequence actor's last answer when it is under a second old, so most are; the
"asked" ones waited for the actor, and their latency is given apart). The machine is shared:
the load average is given beside each round.
Results: loadtests/out/actors_conversations-<time>/summary.{md,json}, chatload logs, server.log.
"""

import argparse
import json
import os
import re
import subprocess
import sys
import threading
import time
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402

ACC = "accumulate_oldest"


def pct(xs, q):
    if not xs:
        return None
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]


class Watcher(threading.Thread):
    """Requests the tree and one page of the table every `every_s`; keeps each one's latency
    and, apart, that of the table requests that asked the sequence actor anew (the answer's
    age_ms went down: a new answer)."""

    def __init__(self, metrics, every_s):
        super().__init__(daemon=True)
        self.tree_url = f"http://{metrics}/v2/actors"
        self.table_url = f"http://{metrics}/v2/actors/conversations?model={ACC}&sort=idle&order=desc&limit=25"
        self.every_s, self.stop = every_s, threading.Event()
        self.tree_ms, self.table_ms, self.asked_ms, self.errors, self.live = [], [], [], 0, []
        self.age = None

    def get(self, url):
        t0 = time.perf_counter()
        with urllib.request.urlopen(url, timeout=10) as r:
            body = json.loads(r.read())
        return (time.perf_counter() - t0) * 1000, body

    def run(self):
        while not self.stop.is_set():
            try:
                ms, _ = self.get(self.tree_url)
                self.tree_ms.append(ms)
                ms, body = self.get(self.table_url)
                self.table_ms.append(ms)
                if self.age is None or body["age_ms"] < self.age:
                    self.asked_ms.append(ms)
                self.age = body["age_ms"]
                self.live.append(body["total"])
            except (OSError, ValueError, KeyError):
                self.errors += 1
            self.stop.wait(self.every_s)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--server", default=os.path.join(common.ROOT, "target/debug/tritium"))
    ap.add_argument("--chatload", default=os.path.join(common.ROOT, "target/debug/chatload"))
    ap.add_argument("--ort", default=common.DEFAULT_ORT)
    ap.add_argument("--conversations", type=int, default=10000)
    ap.add_argument("--rounds", type=int, default=3, help="pairs of (unwatched, watched) rounds")
    ap.add_argument("--duration", type=float, default=10, help="seconds per round")
    ap.add_argument("--probe-rate", type=float, default=20000, help="turns/s offered by the first run (2 s)")
    ap.add_argument("--watch-ms", type=int, default=250)
    ap.add_argument("--connections", type=int, default=2)
    ap.add_argument("--streams", type=int, default=8)
    args = ap.parse_args()
    n = args.conversations
    out = os.path.join(common.DEFAULT_OUT, time.strftime("actors_conversations-%Y%m%d-%H%M%S"))
    os.makedirs(out)
    load_at_start = os.getloadavg()

    def edit(repo):
        cfg = os.path.join(repo, ACC, "config.pbtxt")
        text = open(cfg).read()
        text = re.sub(r"max_candidate_sequences: \d+", f"max_candidate_sequences: {n + 1}", text)
        text = re.sub(r"max_sequence_idle_microseconds: \d+", "max_sequence_idle_microseconds: 600000000", text)
        open(cfg, "w").write(text)

    runs = []
    with common.bench_server(args.server, args.ort, common.DEFAULT_REPO, out, models=[ACC], ready=(ACC,),
                             edit_repo=edit) as srv:
        metrics = f"127.0.0.1:{srv.metrics_port}"

        rate = args.probe_rate

        def one(label, i, duration):
            srv.alive()
            watcher = Watcher(metrics, args.watch_ms / 1000) if label == "watched" else None
            path = os.path.join(out, f"{label}-{i}.json")
            cmd = [args.chatload, "--protocol", "grpc", "--grpc", srv.url("grpc"), "--http", srv.url("http"),
                   "--metrics", metrics, "--conversations", str(n), "--rate", str(rate),
                   "--duration", str(duration), "--connections", str(args.connections),
                   "--streams", str(args.streams), "--sequence-id-base", "1", "--baseline-turns", "10",
                   "--timeout-ms", "60000", "--json", path]
            if watcher:
                watcher.start()
            try:
                run = subprocess.run(cmd, capture_output=True, text=True)
            finally:
                if watcher:
                    watcher.stop.set()
                    watcher.join()
            open(os.path.join(out, f"{label}-{i}.txt"), "w").write(" ".join(cmd) + "\n" + run.stdout + run.stderr)
            if not os.path.exists(path):
                sys.exit(f"chatload failed ({run.returncode}):\n{run.stdout[-2000:]}{run.stderr[-2000:]}")
            f = json.load(open(path))
            rec = {"label": label, "round": i, "turns_per_s": f["achieved_rate"], "errors": f["errors"],
                   "crosstalk": f["crosstalk"], "p99_ms": f["latency_us"]["p99"] / 1e3,
                   "loadavg": os.getloadavg()[0]}
            if watcher:
                rec.update(tree_requests=len(watcher.tree_ms), tree_p50_ms=pct(watcher.tree_ms, 0.5),
                           tree_p99_ms=pct(watcher.tree_ms, 0.99), tree_max_ms=max(watcher.tree_ms, default=None),
                           table_requests=len(watcher.table_ms), table_p50_ms=pct(watcher.table_ms, 0.5),
                           table_p99_ms=pct(watcher.table_ms, 0.99), table_max_ms=max(watcher.table_ms, default=None),
                           asked=len(watcher.asked_ms), asked_p50_ms=pct(watcher.asked_ms, 0.5),
                           asked_max_ms=max(watcher.asked_ms, default=None), watch_errors=watcher.errors,
                           live_seen_max=max(watcher.live, default=0))
            print(json.dumps(rec), flush=True)
            runs.append(rec)

        one("probe", 0, 2)
        rate = round(1.25 * runs[0]["turns_per_s"])
        print(f"ceiling {runs[0]['turns_per_s']:.0f} turns/s: the rounds offer {rate} turns/s", flush=True)
        runs.clear()
        for i in range(1, args.rounds + 1):
            one("unwatched", i, args.duration)
            one("watched", i, args.duration)
    med = {k: common.median([r["turns_per_s"] for r in runs if r["label"] == k]) for k in ("unwatched", "watched")}
    ratio = med["watched"] / med["unwatched"]
    watched = [r for r in runs if r["label"] == "watched"]
    all_ms = lambda key: [r[key] for r in watched if r.get(key) is not None]  # noqa: E731
    summary = {"conversations": n, "rounds": args.rounds, "duration_s": args.duration, "offered_rate": rate,
               "watch_ms": args.watch_ms, "loadavg_at_start": load_at_start, "nproc": os.cpu_count(),
               "git_head": common.git_head(), "runs": runs, "median_turns_per_s": med,
               "ratio_watched_over_unwatched": ratio}
    lines = [
        f"# The conversation table with {n} live conversations ({ACC}, gRPC, chatload offered {rate:.0f} turns/s)",
        "",
        f"{time.strftime('%Y-%m-%d %H:%M')}, git HEAD {summary['git_head'][:12]}, load average at start "
        f"{load_at_start[0]:.2f} on {os.cpu_count()} cores; a watcher every {args.watch_ms} ms.",
        "",
        "| round | turns/s | turn p99 ms | load avg | tree p50 / p99 / max ms | table p50 / p99 / max ms "
        "| asked of the actor: n, p50 / max ms | live seen |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    f1 = lambda v: "–" if v is None else f"{v:.1f}"  # noqa: E731
    for r in runs:
        w = ""
        if r["label"] == "watched":
            w = (f"{f1(r['tree_p50_ms'])} / {f1(r['tree_p99_ms'])} / {f1(r['tree_max_ms'])} | "
                 f"{f1(r['table_p50_ms'])} / {f1(r['table_p99_ms'])} / {f1(r['table_max_ms'])} | "
                 f"{r['asked']}, {f1(r['asked_p50_ms'])} / {f1(r['asked_max_ms'])} | {r['live_seen_max']}")
        else:
            w = " | | | "
        lines.append(f"| {r['label']} {r['round']} | {r['turns_per_s']:.0f} | {r['p99_ms']:.1f} | "
                     f"{r['loadavg']:.1f} | {w} |")
    lines += ["", f"Median turns/s: unwatched {med['unwatched']:.0f}, watched {med['watched']:.0f}; ratio watched / "
              f"unwatched **{ratio:.3f}**. Errors {sum(r['errors'] for r in runs)}, cross-talk "
              f"{sum(r['crosstalk'] for r in runs)}, watcher errors {sum(r['watch_errors'] for r in watched)}; "
              f"table p99 over the watched rounds at most {f1(max(all_ms('table_p99_ms'), default=None))} ms."]
    common.write_summary(out, summary, lines)
    return 0


if __name__ == "__main__":
    sys.exit(main())
