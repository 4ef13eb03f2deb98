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

With --model tiny_chat the conversations are chat conversations on the bundled chat model
(chatload --workload chat: each turn sends the history in the model's chat template and a new
user message, greedy, --max-tokens tokens; every turn's prompt and cached token counts are
checked, and every --reference-every-th turn is sent again after the load as a stateless request
whose reply must be the same). The copy of tiny_chat gets candidates for every conversation, the
idle timeout, and max_sequence_state_bytes sized so that no conversation is evicted: every
conversation of every point live at once, each holding at most the turns it can send in the run
(capped by --max-turns) of at most --turn-tokens tokens each (user message, template and reply),
times the KV bytes per token read from the state's dims, twice over.

  .venv/bin/python loadtests/chat_load.py --model tiny_chat --server <release tritium> \
      --chatload <release chatload> --protocols grpc --conversations 10000 --rate 300 --duration 60

Writes each point's figures (chatload's JSON) and text under loadtests/out/chat-load-<time>/.
"""

import argparse
import json
import math
import os
import re
import subprocess
import sys
import time

import chat_tail
import common


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--server", default=os.path.join(common.ROOT, "target/debug/tritium"))
    ap.add_argument("--chatload", default=os.path.join(common.ROOT, "target/debug/chatload"))
    ap.add_argument("--ort", default=common.DEFAULT_ORT)
    ap.add_argument("--model", default="accumulate_oldest", choices=["accumulate_oldest", "tiny_chat"])
    ap.add_argument("--max-tokens", type=int, default=8, help="tiny_chat: max_tokens of every turn")
    ap.add_argument("--max-turns", type=int, default=20, help="tiny_chat: turns before a conversation starts over")
    ap.add_argument("--turn-tokens", type=int, default=48,
                    help="tiny_chat: tokens a turn adds at most besides its reply (user message and template)")
    ap.add_argument("--reference-every", type=int, default=50,
                    help="tiny_chat: every n-th turn is checked against a stateless request after the load")
    ap.add_argument("--probe-conversations", type=int, default=1000)
    ap.add_argument("--probe-duration", type=float, default=2)
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
    ap.add_argument("--idle-s", type=float, default=None,
                    help="the copy's idle timeout (default: tiny_chat 600 s; accumulate_oldest 30 s and at least "
                         "3 think times of the largest point)")
    ap.add_argument("--queue-delay-us", type=int, default=None,
                    help="the oldest strategy's max_queue_delay_microseconds (bundled: 2000)")
    ap.add_argument("--reclaim", action="store_true", help="wait for the idle reclaim after the last point")
    ap.add_argument("--param", action="append", default=[], metavar="KEY=VALUE",
                    help="set a config parameter of the copy (e.g. intra_op_thread_count=1); repeatable")
    ap.add_argument("--split", action="store_true",
                    help="split every turn of the points (chat_tail.py): the server traces every request, "
                         "chatload writes its turns, perf records the scheduler's events during each point")
    ap.add_argument("--server-arg", action="append", default=[], metavar="ARG",
                    help="an extra argument of the server (e.g. --server-arg=--host-policy=cpu,cpu-cores=1 pins "
                         "the model's instance threads to core 1); repeatable")
    ap.add_argument("--chatload-cores", default=None,
                    help="run chatload (probe and points) on these cores only (taskset -c, e.g. 0)")
    args = ap.parse_args()

    counts = [int(c) for c in args.conversations.split(",")]
    protocols = args.protocols.split(",")
    chat = args.model == "tiny_chat"
    if args.idle_s is None:
        # tiny_chat keeps its bundled 10 minutes (the rate, so the think time, may come from the probe).
        args.idle_s = 600.0 if chat else max(30.0, 3 * max(counts) / args.rate) if args.rate > 0 else 30.0
    out = os.path.join(common.DEFAULT_OUT, time.strftime("chat-load-%Y%m%d-%H%M%S"))
    os.makedirs(out)

    # Each point runs on fresh sequence ids, and an earlier point's conversations stay live until the
    # idle timeout: the candidates must hold all of them at once. Sized for the largest point alone,
    # a later point's newest conversations waited in the backlog until earlier ones expired (turns
    # stalled for about the idle timeout, which looked like a server stall at 10,000).
    probe_n = args.probe_conversations
    candidates = sum(n + 1 for n in counts for _ in protocols) + (probe_n + 1 if args.rate <= 0 else 0) + 1
    # The stateless reference requests of the chat workload (START and END at once) take a
    # candidate each while they run (8 at a time).
    candidates += 16

    def state_cap(text):
        """tiny_chat: bytes of implicit state every conversation of the run may hold at once."""
        per_token = 0
        for dtype, dims in re.findall(r'output_name: "\w+"\s*data_type: (TYPE_\w+)\s*dims: \[([^\]]*)\]', text):
            size = {"TYPE_FP32": 4, "TYPE_INT64": 8, "TYPE_INT32": 4, "TYPE_FP16": 2}[dtype]
            per_token += size * math.prod(d for d in (int(x) for x in dims.split(",")) if d > 0)
        total = 0
        for n in counts + ([probe_n] if args.rate <= 0 else []):
            turns = args.max_turns
            if args.rate > 0:
                turns = min(turns, math.ceil(args.rate * args.duration / n) + 2)
            total += len(protocols) * (n + 1) * turns * (args.turn_tokens + args.max_tokens)
        return 2 * total * per_token

    def edit(repo):
        cfg = os.path.join(repo, args.model, "config.pbtxt")
        text = open(cfg).read()
        if chat:
            cap = state_cap(text)
            text = re.sub(r'(key: "max_sequence_state_bytes" value: \{ string_value: )"\d+"', rf'\1"{cap}"', text)
            print(f"tiny_chat copy: max_sequence_state_bytes {cap} ({cap / 2**30:.1f} GiB), "
                  f"{candidates} candidates, idle {args.idle_s:.0f} s", flush=True)
        text = re.sub(r"max_candidate_sequences: \d+", f"max_candidate_sequences: {candidates}", text)
        if args.queue_delay_us is not None:
            text = re.sub(r"max_queue_delay_microseconds: \d+", f"max_queue_delay_microseconds: {args.queue_delay_us}",
                          text)
        text = re.sub(r"max_sequence_idle_microseconds: \d+",
                      f"max_sequence_idle_microseconds: {int(args.idle_s * 1e6)}", text)
        for kv in args.param:
            key, value = kv.split("=", 1)
            line = f'parameters {{ key: "{key}" value: {{ string_value: "{value}" }} }}'
            text, found = re.subn(rf'parameters \{{ key: "{re.escape(key)}" value: \{{ string_value: "[^"]*" \}} \}}',
                                  line, text)
            if not found:
                text += line + "\n"
        open(cfg, "w").write(text)

    workload, point_only = [], []
    if chat:
        workload = ["--workload", "chat", "--model", "tiny_chat", "--max-tokens", str(args.max_tokens),
                    "--max-turns", str(args.max_turns),
                    "--tokenizer", os.path.join(common.DEFAULT_REPO, "tiny_chat", "1", "tokenizer.json")]
        point_only = ["--reference-every", str(args.reference_every), "--baseline-turns", "40"]
    extra = (chat_tail.trace_args(out) if args.split else []) + args.server_arg
    pin = ["taskset", "-c", args.chatload_cores] if args.chatload_cores else []
    with common.bench_server(args.server, args.ort, common.DEFAULT_REPO, out, models=[args.model],
                             ready=(args.model,), edit_repo=edit, extra_args=extra) as srv:
        base = 1
        rate = args.rate
        if rate <= 0:
            # Saturation, same server, same run: --probe-conversations (over --probe-protocol), offered far
            # more than the server can take; what it answers per second is its ceiling.
            probe = os.path.join(out, "probe.json")
            cmd = [*pin, args.chatload, "--protocol", args.probe_protocol, "--grpc", srv.url("grpc"), "--http", srv.url("http"),
                   "--metrics", f"127.0.0.1:{srv.metrics_port}", "--conversations", str(probe_n),
                   "--rate", str(args.probe_rate), "--duration", str(args.probe_duration), "--baseline-turns", "10",
                   "--connections",
                   str(args.grpc_connections if args.probe_protocol == "grpc" else args.http_connections), "--streams", str(args.streams),
                   "--sequence-id-base", str(base), "--timeout-ms", "60000", "--json", probe, *workload,
                   *(["--reference-every", "0"] if chat else [])]
            base += probe_n + 1
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
            cmd = [*pin, args.chatload, "--protocol", protocol, "--http", srv.url("http"), "--grpc", srv.url("grpc"),
                   "--metrics", f"127.0.0.1:{srv.metrics_port}", "--pid", str(srv.proc.pid),
                   "--conversations", str(n), "--rate", str(rate), "--duration", str(args.duration),
                   "--connections", str(args.grpc_connections if protocol == "grpc" else args.http_connections),
                   "--streams", str(args.streams), "--sequence-id-base", str(base), "--timeout-ms", "30000",
                   "--json", json_path, *workload, *point_only]
            if last and args.reclaim:
                cmd += ["--reclaim-wait", str(args.idle_s + 30)]
            base += n + 1
            point = f"{protocol}-{n}"
            if args.split:
                cmd += ["--turns-out", os.path.join(out, f"{point}-turns.csv")]
                sched = chat_tail.start_sched(out, point)
            run = subprocess.run(cmd, capture_output=True, text=True)
            if args.split:
                chat_tail.stop_sched(sched, out, point, srv.proc.pid)
            text = run.stdout + run.stderr
            open(os.path.join(out, f"{protocol}-{n}.txt"), "w").write(" ".join(cmd) + "\n" + text)
            print(text, flush=True)
            if run.returncode != 0:
                print(f"chatload exited with {run.returncode}", file=sys.stderr)
                return run.returncode
            srv.alive()
    if args.split:
        for n, p in points:
            chat_tail.analyze(out, f"{p}-{n}")
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
