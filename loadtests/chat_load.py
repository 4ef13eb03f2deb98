"""Chat-shaped load (issue 17 point 2): runs loadtests/chatload against one server started here
with a copy of `accumulate_oldest` whose sequence batching is sized for the run.

The bundled config keeps 1,024 candidate sequences and releases a sequence after 5 s idle; a run
of N live conversations whose think time is N / rate seconds needs max_candidate_sequences >= N
and an idle timeout above the think time. Each (conversations, protocol) point runs on fresh
sequence ids, and earlier points' conversations stay live until the idle timeout, so the copy gets
max_candidate_sequences = the sum of every point's conversations (each with its baseline
conversation, and the probe's) and --idle-s (default 30); the last point also waits for the idle
timeout to reclaim every conversation.

  .venv/bin/python loadtests/chat_load.py --server target/debug/tritium \\
      --chatload target/debug/chatload --conversations 1000,10000 --duration 20 --reclaim

With no --rate, a probe first measures the saturation rate (gRPC, 1,000 conversations, offered
far more than the server answers) and the points run at half of it.

Writes each point's figures (chatload's JSON) and text under loadtests/out/chat-load-<time>/.
"""

import argparse
import json
import os
import re
import subprocess
import sys
import time

import common


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--server", default=os.path.join(common.ROOT, "target/debug/tritium"))
    ap.add_argument("--chatload", default=os.path.join(common.ROOT, "target/debug/chatload"))
    ap.add_argument("--ort", default=common.DEFAULT_ORT)
    ap.add_argument("--conversations", default="1000,10000")
    ap.add_argument("--protocols", default="grpc,http")
    ap.add_argument("--rate", type=float, default=0,
                    help="total turns/s; 0: half the saturation rate that a probe measures first")
    ap.add_argument("--probe-protocol", default="grpc")
    ap.add_argument("--probe-rate", type=float, default=20000,
                    help="the probe's offered rate (far above saturation: its achieved rate is the saturation)")
    ap.add_argument("--duration", type=float, default=20)
    ap.add_argument("--http-connections", type=int, default=32)
    ap.add_argument("--grpc-connections", type=int, default=2)
    ap.add_argument("--streams", type=int, default=4)
    ap.add_argument("--idle-s", type=float, default=30)
    ap.add_argument("--queue-delay-us", type=int, default=None,
                    help="the oldest strategy's max_queue_delay_microseconds (bundled: 2000)")
    ap.add_argument("--reclaim", action="store_true", help="wait for the idle reclaim after the last point")
    args = ap.parse_args()

    counts = [int(c) for c in args.conversations.split(",")]
    protocols = args.protocols.split(",")
    out = os.path.join(common.DEFAULT_OUT, time.strftime("chat-load-%Y%m%d-%H%M%S"))
    os.makedirs(out)

    # Each point runs on fresh sequence ids, and an earlier point's conversations stay live until the
    # idle timeout: the candidates must hold all of them at once. Sized for the largest point alone,
    # a later point's newest conversations waited in the backlog until earlier ones expired (turns
    # stalled for about the idle timeout, which looked like a server stall at 10,000).
    candidates = sum(n + 1 for n in counts for _ in protocols) + (1001 if args.rate <= 0 else 0) + 1

    def edit(repo):
        cfg = os.path.join(repo, "accumulate_oldest", "config.pbtxt")
        text = open(cfg).read()
        text = re.sub(r"max_candidate_sequences: \d+", f"max_candidate_sequences: {candidates}", text)
        if args.queue_delay_us is not None:
            text = re.sub(r"max_queue_delay_microseconds: \d+", f"max_queue_delay_microseconds: {args.queue_delay_us}",
                          text)
        text = re.sub(r"max_sequence_idle_microseconds: \d+",
                      f"max_sequence_idle_microseconds: {int(args.idle_s * 1e6)}", text)
        open(cfg, "w").write(text)

    with common.bench_server(args.server, args.ort, common.DEFAULT_REPO, out, models=["accumulate_oldest"],
                             ready=("accumulate_oldest",), edit_repo=edit) as srv:
        base = 1
        rate = args.rate
        if rate <= 0:
            # Saturation, same server, same run: 1,000 conversations (over --probe-protocol), offered far more
            # than the server can take; what it answers per second is its ceiling.
            probe = os.path.join(out, "probe.json")
            cmd = [args.chatload, "--protocol", args.probe_protocol, "--grpc", srv.url("grpc"), "--http", srv.url("http"),
                   "--metrics", f"127.0.0.1:{srv.metrics_port}", "--conversations", "1000",
                   "--rate", str(args.probe_rate), "--duration", "2", "--baseline-turns", "10",
                   "--connections",
                   str(args.grpc_connections if args.probe_protocol == "grpc" else args.http_connections), "--streams", str(args.streams),
                   "--sequence-id-base", str(base), "--timeout-ms", "60000", "--json", probe]
            base += 1001
            run = subprocess.run(cmd, capture_output=True, text=True)
            open(os.path.join(out, "probe.txt"), "w").write(" ".join(cmd) + "\n" + run.stdout + run.stderr)
            print(run.stdout + run.stderr, flush=True)
            saturation = json.load(open(probe))["achieved_rate"]
            rate = round(saturation / 2)
            print(f"saturation {saturation:.0f} turns/s: the points run at {rate} turns/s", flush=True)
        points = [(n, p) for n in counts for p in protocols]
        for i, (n, protocol) in enumerate(points):
            last = i == len(points) - 1
            json_path = os.path.join(out, f"{protocol}-{n}.json")
            cmd = [args.chatload, "--protocol", protocol, "--http", srv.url("http"), "--grpc", srv.url("grpc"),
                   "--metrics", f"127.0.0.1:{srv.metrics_port}", "--pid", str(srv.proc.pid),
                   "--conversations", str(n), "--rate", str(rate), "--duration", str(args.duration),
                   "--connections", str(args.grpc_connections if protocol == "grpc" else args.http_connections),
                   "--streams", str(args.streams), "--sequence-id-base", str(base), "--timeout-ms", "30000",
                   "--json", json_path]
            if last and args.reclaim:
                cmd += ["--reclaim-wait", str(args.idle_s + 30)]
            base += n + 1
            run = subprocess.run(cmd, capture_output=True, text=True)
            text = run.stdout + run.stderr
            open(os.path.join(out, f"{protocol}-{n}.txt"), "w").write(" ".join(cmd) + "\n" + text)
            print(text, flush=True)
            if run.returncode != 0:
                print(f"chatload exited with {run.returncode}", file=sys.stderr)
                return run.returncode
            srv.alive()
    summary = [json.load(open(os.path.join(out, f"{p}-{n}.json"))) for n, p in points]
    print("conversations protocol rate achieved p50_ms p99_ms p99_from_sent_ms send_lag_p99_ms unloaded_p50_ms "
          "server_us queue_us compute_per_turn_us p99/compute errors crosstalk state_B/conv rss_MiB "
          "server_cpu_us/turn client_cpu_us/turn")
    for f in summary:
        compute = f["compute_per_turn_us"]
        print(f"{f['conversations']} {f['protocol']} {f['target_rate']:.0f} {f['achieved_rate']:.0f} "
              f"{f['latency_us']['p50'] / 1e3:.2f} {f['latency_us']['p99'] / 1e3:.2f} "
              f"{f['from_send_us']['p99'] / 1e3:.2f} {f['send_lag_us']['p99'] / 1e3:.2f} "
              f"{f['unloaded_us']['p50'] / 1e3:.2f} {f['server_us']:.0f} {f['queue_us']:.0f} {compute:.0f} "
              f"{f['latency_us']['p99'] / compute if compute else 0:.1f} {f['errors']} "
              f"{f['crosstalk']} {f['state_bytes_per_conversation']:.1f} {f['rss_loaded'] / 2**20:.1f} "
              f"{f['server_cpu_us_per_turn']:.0f} {f['client_cpu_us_per_turn']:.0f}")
    print(f"figures in {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
