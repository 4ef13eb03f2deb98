#!/usr/bin/env python3
"""The turn-k curve of a chat conversation on tiny_chat through /v1/chat/completions: the time
of turn k (k = 1..K) when the conversation has an id (X-Conversation-Id: the engine keeps the
KV cache, so turn k runs only its new tokens) against the same request without an id (the model
runs the whole history again). Both send the whole history, as OpenAI clients do; each turn adds
a user message of about 60 tokens (with its template) and a greedy reply of --max-tokens tokens. The two modes run
interleaved, turn by turn, on the same messages, for --conversations conversations; the table
gives each k's median. Every reply of the two modes must be the same text (the cache changes
nothing in the answer), and the cached turn must report the history as cached tokens.

  .venv/bin/python loadtests/chat_turns.py [--server target/debug/tritium] [--turns 20]

Results: loadtests/out/chat-turns-<time>/summary.{md,json}, server.log.
"""

import argparse
import json
import os
import statistics
import sys
import time
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402

USER = "Turn {k} of conversation {c}: and then what happened? Briefly."


def chat(base, messages, max_tokens, conversation=None):
    body = json.dumps({"model": "tiny_chat", "messages": messages, "max_tokens": max_tokens, "temperature": 0})
    req = urllib.request.Request(f"{base}/v1/chat/completions", data=body.encode(), method="POST",
                                 headers={"Content-Type": "application/json"})
    if conversation:
        req.add_header("X-Conversation-Id", conversation)
    t0 = time.perf_counter()
    with urllib.request.urlopen(req, timeout=120) as r:
        answer = json.load(r)
    return time.perf_counter() - t0, answer


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--server", default=os.path.join(common.ROOT, "target/debug/tritium"))
    ap.add_argument("--onnxruntime-library", default=common.DEFAULT_ORT)
    ap.add_argument("--model-repository", default=common.DEFAULT_REPO)
    ap.add_argument("--turns", type=int, default=20)
    ap.add_argument("--conversations", type=int, default=3)
    ap.add_argument("--max-tokens", type=int, default=32)
    ap.add_argument("--out", default=common.DEFAULT_OUT)
    args = ap.parse_args()
    out_dir, _ = common.make_out_dir(args, "chat-turns")
    header = {"time": time.strftime("%Y-%m-%d %H:%M:%S %Z"), "git_head": common.git_head(),
              "server": os.path.abspath(args.server), "loadavg_at_start": os.getloadavg()[0], "nproc": os.cpu_count()}
    rows = {k: {"cached": [], "resent": [], "prompt": [], "cached_tokens": []} for k in range(1, args.turns + 1)}
    with common.bench_server(args.server, args.onnxruntime_library, args.model_repository, out_dir,
                             models=["tiny_chat"], ready=("tiny_chat",)) as srv:
        for c in range(args.conversations):
            messages = []
            conv = f"turns-{c}-{int(time.time())}"
            for k in range(1, args.turns + 1):
                messages.append({"role": "user", "content": USER.format(k=k, c=c)})
                t_cached, a = chat(srv.base, messages, args.max_tokens, conversation=conv)
                t_resent, b = chat(srv.base, messages, args.max_tokens)
                text = a["choices"][0]["message"]["content"]
                if b["choices"][0]["message"]["content"] != text:
                    sys.exit(f"turn {k}: the cached and the resent replies differ:\n{text!r}\n{b['choices'][0]['message']['content']!r}")
                usage = a["usage"]
                # Turn k reuses all the cache holds: turn k-1's prompt and reply but its last token.
                if k > 1 and usage["prompt_tokens_details"]["cached_tokens"] != held:
                    sys.exit(f"turn {k}: {usage['prompt_tokens_details']['cached_tokens']} of "
                             f"{usage['prompt_tokens']} prompt tokens came from the cache, not {held}")
                if b["usage"]["prompt_tokens_details"]["cached_tokens"] != 0:
                    sys.exit(f"turn {k}: a request without an id used a cache")
                held = usage["prompt_tokens"] + usage["completion_tokens"] - 1
                r = rows[k]
                r["cached"].append(t_cached)
                r["resent"].append(t_resent)
                r["prompt"].append(usage["prompt_tokens"])
                r["cached_tokens"].append(usage["prompt_tokens_details"]["cached_tokens"])
                messages.append({"role": "assistant", "content": text})
                print(f"conversation {c} turn {k}: prompt {usage['prompt_tokens']} tokens, "
                      f"cached {t_cached * 1000:.0f} ms, resent {t_resent * 1000:.0f} ms", flush=True)
    lines = [
        f"# Turn-k curve, tiny_chat, {args.conversations} conversations, replies of {args.max_tokens} tokens",
        "",
        f"{header['time']}, server {header['server']} (git {header['git_head']}), "
        f"load average {header['loadavg_at_start']:.2f} at start, {header['nproc']} CPUs",
        "",
        "| turn k | prompt tokens | cached from the conversation | time with the id (ms) | time re-sending the history without an id (ms) | ratio |",
        "| ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    summary = {"header": header, "turns": []}
    for k, r in rows.items():
        cached, resent = statistics.median(r["cached"]) * 1000, statistics.median(r["resent"]) * 1000
        prompt, hit = int(statistics.median(r["prompt"])), int(statistics.median(r["cached_tokens"]))
        lines.append(f"| {k} | {prompt} | {hit} | {cached:.0f} | {resent:.0f} | {resent / cached:.2f} |")
        summary["turns"].append({"k": k, "prompt_tokens": prompt, "cached_tokens": hit,
                                 "cached_ms": cached, "resent_ms": resent})
    common.write_summary(out_dir, summary, lines)


if __name__ == "__main__":
    main()
