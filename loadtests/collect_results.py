#!/usr/bin/env python3
"""Collects one run_all.sh run folder (loadtests/out/run_all-<time>/) into a Markdown report on
stdout: versions, commands with their exit status, then every script's summary.md (headings one
level down). run_all.sh writes it to loadtests/RESULTS.md.

  .venv/bin/python loadtests/collect_results.py loadtests/out/run_all-<time> > loadtests/RESULTS.md
"""

import glob
import hashlib
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402


def main():
    run = os.path.abspath(sys.argv[1])
    meta = json.load(open(os.path.join(run, "meta.json")))
    server = meta["server"]
    digest = "missing"
    if os.path.exists(server):
        digest = hashlib.sha256(open(server, "rb").read()).hexdigest()[:16]
    out = [
        "# Load test results", "",
        f"Produced by `loadtests/run_all.sh` on {meta['started']} – {meta['finished']}; raw logs in "
        f"`loadtests/out/{os.path.basename(run)}/` (git-ignored, not kept).", "",
        "| what | value |", "| --- | --- |",
        f"| perf_analyzer | {common.PA_VERSION} (PyPI wheel tritonclient=={common.PA_VERSION}, loadtests/setup.sh) |",
        f"| git HEAD when run | `{meta['git_head']}` |",
        f"| server binary | `{server}`, sha256 {digest}…, built from `{common.server_commit(server)}` "
        "(release, `--locked`, git worktree) |",
        f"| ONNX Runtime | `{os.path.basename(meta['onnxruntime_library'])}` |",
        f"| machine | {meta['nproc']} cores, load average {meta['loadavg_start']} at start, "
        f"{meta['loadavg_end']} at end (shared with other work) |", "",
        "These machines have 2 cores shared with builds and tests of other sessions, and "
        "perf_analyzer shares them with the server: absolute figures drift 2-3x between runs a "
        "minute apart. Read the ratios measured within one run and the min–max spreads.", "",
        "## Commands", "",
        "Each script ran as `.venv/bin/python loadtests/<script> <args> --server "
        f"{server} --onnxruntime-library .venv/…/{os.path.basename(meta['onnxruntime_library'])} "
        "--out loadtests/out/run_all-<time>`, its exit status below it:", "", "```sh",
    ]
    for line in open(os.path.join(run, "commands.txt")):
        out.append(line.rstrip("\n"))
    out += ["```", ""]
    for d in sorted(glob.glob(os.path.join(run, "*", "summary.md")), key=os.path.getmtime):
        text = open(d).read()
        out.append(f"<!-- {os.path.relpath(d, run)} -->")
        for ln in text.splitlines():
            out.append("#" + ln if ln.startswith("#") else ln)
        out.append("")
    missing = [s for s in meta.get("failed", [])]
    if missing:
        out += ["## Scripts that exited non-zero", ""] + [f"- `{m}`" for m in missing] + [""]
    print("\n".join(out))


if __name__ == "__main__":
    main()
