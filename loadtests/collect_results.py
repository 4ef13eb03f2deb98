#!/usr/bin/env python3
"""Collects one run_all.sh run folder (loadtests/out/run_all-<time>/) into a Markdown report on
stdout: versions, commands with their exit status, then every script's summary.md (headings one
level down). run_all.sh writes it to loadtests/RESULTS.md.

  .venv/bin/python loadtests/collect_results.py loadtests/out/run_all-<time> > loadtests/RESULTS.md
  .venv/bin/python loadtests/collect_results.py RUN --keep-from loadtests/RESULTS.md > new.md

When the run has a targets.py folder, its targets.md (the issue's targets table) goes right after
the versions. --keep-from OLD (run_all.sh --only): the sections of OLD whose script did not run
this time are appended, each marked with the run they came from.
"""

import argparse
import glob
import hashlib
import json
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402


def script_of(marker_path):
    """'json_vs_binary-20261203-120306/summary.md' -> 'json_vs_binary'."""
    return re.sub(r"-\d{8}-\d{6}$", "", marker_path.split("/")[0])


def kept_sections(old_path, scripts_now, also=()):
    """The summary sections of an earlier RESULTS.md whose script is not in scripts_now, and those
    of the scripts in `also` even when they ran again (to compare two builds)."""
    text = open(old_path).read()
    produced = re.search(r"^Produced by .*? on (.*?);", text, re.M)
    built = re.search(r"built from `([0-9a-f]+|unrecorded)`", text)
    origin = (f"*(kept from the earlier run of {produced.group(1) if produced else 'unknown date'}, server "
              f"built from `{built.group(1)[:12] if built else 'unknown'}`; not re-run in this run)*")
    blocks, cur = [], None
    for ln in text.splitlines():
        m = re.match(r"^<!-- (\S+/summary\.md) -->", ln)
        if m:
            cur = [m.group(1), [ln]]
            blocks.append(cur)
        elif ln.startswith("## Scripts that exited non-zero"):
            cur = None
        elif cur is not None:
            cur[1].append(ln)
    out = []
    for path, lines in blocks:
        if script_of(path) in scripts_now and script_of(path) not in also:
            continue
        if not any(ln.startswith("*(kept from") for ln in lines[:4]):
            note = origin
            if script_of(path) in scripts_now:
                note = origin.replace("not re-run in this run", "the same script on that build, kept to compare "
                                      "with this run's section above; ratios, not absolute figures, compare")
            lines = lines[:2] + ["", note] + lines[2:]
        out += lines
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("run", help="a loadtests/out/run_all-<time> folder")
    ap.add_argument("--keep-from", help="an earlier RESULTS.md whose other sections are kept")
    ap.add_argument("--compare", default="", help="comma-separated scripts (e.g. batching) whose section "
                    "in --keep-from is kept even though they ran again")
    args = ap.parse_args()
    run = os.path.abspath(args.run)
    meta = json.load(open(os.path.join(run, "meta.json")))
    server = meta["server"]
    digest = "missing"
    if os.path.exists(server):
        digest = hashlib.sha256(open(server, "rb").read()).hexdigest()[:16]
    out = [
        "# Load test results", "",
        f"Produced by `loadtests/run_all.sh` on {meta['started']} – {meta['finished']}; raw logs in "
        f"`loadtests/out/{os.path.basename(run)}/` (git-ignored, not kept).", "",
    ]
    summaries = sorted(glob.glob(os.path.join(run, "*", "summary.md")), key=os.path.getmtime)
    for t in glob.glob(os.path.join(run, "targets-*", "targets.md")):
        out += ["## Targets (issue #4)", ""] + open(t).read().rstrip("\n").splitlines() + [""]
    out += [
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
    for d in summaries:
        text = open(d).read()
        out.append(f"<!-- {os.path.relpath(d, run)} -->")
        for ln in text.splitlines():
            out.append("#" + ln if ln.startswith("#") else ln)
        out.append("")
    if args.keep_from:
        now = {script_of(os.path.relpath(d, run)) for d in summaries}
        out += kept_sections(args.keep_from, now, {c.removesuffix(".py") for c in args.compare.split(",") if c})
        out.append("")
    missing = [s for s in meta.get("failed", [])]
    if missing:
        out += ["## Scripts that exited non-zero", ""] + [f"- `{m}`" for m in missing] + [""]
    print("\n".join(out))


if __name__ == "__main__":
    main()
