"""targets.py's plan (subjects, and what each is measured on) and its report: the summary tables (targets, where the time goes, CPU per inference,
ratios within each repeat) written from a run's measured rows. Split from targets.py, which
measures; hotpath.py reads busy() and us_per_inference() through targets.py too."""

import os

import common
from common import median, spread

SUBJECTS = ["ceiling", "tritium", "flask", "fastapi", "triton", "floor", "floor_grpc"]
# (subject, model, protocol, format, concurrency); format "json" or "bin"
PLAN = {
    "tritium": [("mlp", "http", "json", 1), ("mlp", "http", "json", 16), ("mlp", "http", "bin", 1),
                ("mlp", "http", "bin", 16), ("mlp", "grpc", "bin", 1), ("mlp", "grpc", "bin", 16),
                ("mlp", "grpc", "bin", 64), ("mlp", "grpc", "bin-b16", 4), ("mlp", "grpc", "bin-b64", 2),
                ("add_sub", "http", "bin", 1), ("add_sub", "grpc", "bin", 1)],
    "flask": [("mlp", "http", "json", 1), ("mlp", "http", "json", 16)],
    "fastapi": [("mlp", "http", "json", 1), ("mlp", "http", "json", 16)],
    "triton": [("mlp", "http", "bin", 1), ("mlp", "http", "bin", 16), ("mlp", "grpc", "bin", 1),
               ("mlp", "grpc", "bin", 16), ("mlp", "grpc", "bin", 64), ("add_sub", "http", "bin", 1),
               ("add_sub", "grpc", "bin", 1)],
    "floor": [("add_sub", "http", "bin", 1)],
    "floor_grpc": [("add_sub", "grpc", "bin", 1)],
}
NO_STATS = ("flask", "fastapi", "floor", "floor_grpc")  # subjects without the statistics extension


def client_batch(fmt):
    """perf_analyzer's -b for a plan's format: "bin-b64" -> 64."""
    return int(fmt.partition("-b")[2] or 1)


def model_cpu_per_item(batches, batch):
    """ONNX Runtime's CPU µs per item at `batch` items per run (a server's batch efficiency, not
    a whole number), interpolated linearly between the ceiling's nearest measured batch sizes
    (`batches`: {batch: ceiling result}); the nearest one outside their range."""
    pts = sorted((int(b), r["cpu_us_per_item"]) for b, r in batches.items() if r.get("cpu_us_per_item"))
    if not pts:
        return None
    if batch <= pts[0][0]:
        return pts[0][1]
    for (b0, c0), (b1, c1) in zip(pts, pts[1:]):
        if b0 <= batch <= b1:
            return c0 + (c1 - c0) * (batch - b0) / (b1 - b0)
    return pts[-1][1]


def pick(runs, rep, subject, model, protocol, fmt, c):
    for r in runs:
        if (r["repeat"], r["subject"], r["model"], r["protocol"], r["fmt"], r["concurrency"]) == \
                (rep, subject, model, protocol, fmt, c):
            return r
    return None


def why_lines(runs, ceiling):
    """Where the time goes for each target, from the server-side statistics (medians over repeats)."""
    def agg(subject, model, proto, fmt, c):
        xs = [r for r in runs if (r["subject"], r["model"], r["protocol"], r["fmt"], r["concurrency"]) ==
              (subject, model, proto, fmt, c)]
        if not xs:
            return None
        keys = ("infer_per_s", "p50_us", "p99_us", "server_queue_us", "server_compute_input_us",
                "server_compute_infer_us", "server_compute_output_us", "network_server_us", "client_send_us",
                "server_cores", "client_cores")
        out = {k: median(r.get(k, 0) for r in xs) for k in keys}
        out["batch_efficiency"] = median(r.get("batch_efficiency", 1.0) for r in xs)
        out["busy"] = median(busy(r) for r in xs) if subject not in NO_STATS else None
        return out

    lines = ["", "Where the time goes (medians over the repeats; server figures from the statistics extension "
             "over perf_analyzer's windows, per request; compute infer per request = the time of the execution "
             "it ran in):", ""]
    t64, t16 = agg("tritium", "mlp", "grpc", "bin", 64), agg("tritium", "mlp", "http", "json", 16)
    if t64 and ceiling:
        b = t64["batch_efficiency"]
        nb = min((1, 8, 32, 64), key=lambda x: abs(x - b))
        cp = median(c["batches"][nb]["p50_us"] for c in ceiling if nb in c["batches"])
        lines.append(f"- ceiling: Tritium's gRPC c64 run batches {b:.1f} requests per execution, whose ONNX Runtime "
                     f"run takes {t64['server_compute_infer_us']:.0f} µs in the server against {cp:.0f} µs in the "
                     f"ceiling at batch {nb} (the cores are shared with perf_analyzer's 64 threads and the "
                     f"server's network threads), and the instance computes only {t64['busy']:.0f} % of the wall "
                     f"time; each request also spends {t64['network_server_us']:.0f} µs in the network and the "
                     f"server outside the statistics and {t64['server_queue_us']:.0f} µs queued.")
    for base in ("flask", "fastapi"):
        b16 = agg(base, "mlp", "http", "json", 16)
        if t16 and b16:
            lines.append(f"- {base}: at c16 (HTTP JSON) Tritium does {t16['infer_per_s']:.0f} infer/s, {base} "
                         f"{b16['infer_per_s']:.0f} (p50 {t16['p50_us']:.0f} vs {b16['p50_us']:.0f} µs); Tritium's "
                         f"instance is busy {t16['busy']:.0f} % at batch {t16['batch_efficiency']:.1f}, compute infer "
                         f"{t16['server_compute_infer_us']:.0f} µs, queue {t16['server_queue_us']:.0f} µs, network + "
                         f"server outside statistics {t16['network_server_us']:.0f} µs per request.")
    for proto in ("http", "grpc"):
        t, tr = agg("tritium", "mlp", proto, "bin", 16), agg("triton", "mlp", proto, "bin", 16)
        if t and tr:
            lines.append(f"- Triton {proto} c16: Triton's instance is busy {tr['busy']:.0f} % at batch "
                         f"{tr['batch_efficiency']:.1f} (compute in/infer/out {tr['server_compute_input_us']:.0f}/"
                         f"{tr['server_compute_infer_us']:.0f}/{tr['server_compute_output_us']:.0f} µs, outside "
                         f"statistics {tr['network_server_us']:.0f} µs), Tritium's {t['busy']:.0f} % at batch "
                         f"{t['batch_efficiency']:.1f} ({t['server_compute_input_us']:.0f}/"
                         f"{t['server_compute_infer_us']:.0f}/{t['server_compute_output_us']:.0f} µs, outside "
                         f"statistics {t['network_server_us']:.0f} µs): Triton's one instance is near saturation; "
                         "Tritium's computes faster per batch but sits idle the rest of the time, while its requests "
                         "spend longer outside the statistics (HTTP/gRPC handling and the hand-off to the "
                         "scheduler, on the 2 cores perf_analyzer also uses).")
    lines += cpu_lines(agg, ceiling)
    t, tr = agg("tritium", "add_sub", "http", "bin", 1), agg("triton", "add_sub", "http", "bin", 1)
    if t and tr:
        tc = t["server_compute_input_us"] + t["server_compute_infer_us"] + t["server_compute_output_us"]
        rc = tr["server_compute_input_us"] + tr["server_compute_infer_us"] + tr["server_compute_output_us"]
        lines.append(f"- add_sub c1: p50 {t['p50_us']:.0f} µs (Tritium) vs {tr['p50_us']:.0f} µs (Triton); compute "
                     f"{tc:.0f} vs {rc:.0f} µs and queue {t['server_queue_us']:.0f} vs {tr['server_queue_us']:.0f} µs, "
                     f"but network + server outside the statistics {t['network_server_us']:.0f} vs "
                     f"{tr['network_server_us']:.0f} µs and client send {t['client_send_us']:.0f} vs "
                     f"{tr['client_send_us']:.0f} µs: Tritium's model time is lower, its HTTP path outside "
                     "the model is where it loses.")
    return lines


def us_per_inference(r, key):
    """CPU µs per inference from a run's (or an aggregate's) cores used under `key`; None where
    not measured."""
    if r.get(key) is None or not r["infer_per_s"]:
        return None
    return r[key] * 1e6 / r["infer_per_s"]


def cpu_lines(agg, ceiling):
    """What the 2 cores allow: CPU per inference of each server and of perf_analyzer, and the
    most a server could serve at c16 if it spent only the ceiling's ONNX Runtime CPU per item."""
    per_inf = us_per_inference
    lines, ncores = [], os.cpu_count() or 2
    for subject, proto, fmt in (("tritium", "http", "json"), ("flask", "http", "json"), ("fastapi", "http", "json"),
                                ("tritium", "grpc", "bin"), ("triton", "grpc", "bin")):
        a = agg(subject, "mlp", proto, fmt, 16)
        if not a or a.get("server_cores") is None:
            continue
        lines.append(f"- CPU, {subject} mlp {proto} {fmt} c16: the server used {a['server_cores']:.2f} cores and "
                     f"perf_analyzer {a['client_cores']:.2f} of the {ncores} ({per_inf(a, 'server_cores'):.0f} and "
                     f"{per_inf(a, 'client_cores'):.0f} CPU µs per inference).")
    # (protocol, tensors, the baseline the target multiplies, the factor)
    for proto, fmt, base, factor in (("grpc", "bin", "triton", 3), ("http", "json", "flask", 8)):
        t, other = agg("tritium", "mlp", proto, fmt, 16), agg(base, "mlp", proto, fmt, 16)
        if not (t and other and ceiling and per_inf(t, "client_cores") is not None):
            continue
        nb = t["batch_efficiency"]
        cpu = [model_cpu_per_item(c["batches"], nb) for c in ceiling]
        cpu = [x for x in cpu if x]
        if not cpu:
            continue
        item, client = median(cpu), per_inf(t, "client_cores")
        bound = ncores * 1e6 / (client + item)
        lines.append(f"- Bound at {proto} {fmt} c16 with batch-1 clients: perf_analyzer's {client:.0f} CPU µs per "
                     f"inference plus the ceiling's {item:.0f} CPU µs per item at batch {nb:.1f} (ONNX Runtime alone, "
                     f"no server work) leave at most {bound:.0f} infer/s on {ncores} cores; {factor}× {base}'s "
                     f"{other['infer_per_s']:.0f} would be {factor * other['infer_per_s']:.0f}, and Tritium served "
                     f"{t['infer_per_s']:.0f} ({t['infer_per_s'] / bound:.2f} of the bound).")
    return lines


def cpu_cell(xs, key):
    """Median CPU µs per inference of `key` (cores used) over runs, '-' where not measured."""
    vals = [v for v in (us_per_inference(r, key) for r in xs) if v is not None]
    return f"{median(vals):.0f}" if vals else "-"


def busy(r):
    """Share of wall time (%) the instance computed, from infer/s, batch efficiency and the
    per-request server compute times."""
    be = r.get("batch_efficiency") or 1.0
    per = r["server_compute_input_us"] + r["server_compute_infer_us"] + r["server_compute_output_us"]
    return 100.0 * r["infer_per_s"] / be * per / 1e6


def fmt_num(x, digits=0):
    return "-" if x is None else (f"{x:.{digits}f}")


def summarize(args, out_dir, stamp, header, subjects, runs, failures, ceiling, triton_cfg):
    reps = sorted({r["repeat"] for r in runs} | {c["repeat"] for c in ceiling})
    ceil_by_rep = {c["repeat"]: c["batches"] for c in ceiling}
    per_rep = {}  # name -> {repeat: value}
    ratios = {}  # name -> list of per-repeat values

    def add(name, v):
        if v is not None:
            per_rep.setdefault(name, {})[rep] = v
            ratios.setdefault(name, []).append(v)

    extra = {}
    for rep in reps:
        g = lambda *k: pick(runs, rep, *k)  # noqa: E731
        tri = [r for r in runs if r["repeat"] == rep and r["subject"] == "tritium" and r["model"] == "mlp"]
        best = max(tri, key=lambda r: r["infer_per_s"]) if tri else None
        cb = ceil_by_rep.get(rep)
        if best and cb:
            top = max(cb.values(), key=lambda r: r["items_per_s"])
            add("sat_vs_ceiling", best["infer_per_s"] / top["items_per_s"])
            extra.setdefault("best", []).append(f"{best['protocol']}-{best['fmt']} c{best['concurrency']}")
            b1 = [r for r in tri if client_batch(r["fmt"]) == 1]
            if b1:
                add("sat_b1_vs_ceiling", max(r["infer_per_s"] for r in b1) / top["items_per_s"])
        t16 = g("tritium", "mlp", "http", "json", 16)
        for base in ("flask", "fastapi"):
            b16 = g(base, "mlp", "http", "json", 16)
            if t16 and b16:
                add(f"vs_{base}_c16", t16["infer_per_s"] / b16["infer_per_s"])
            t1, b1 = g("tritium", "mlp", "http", "json", 1), g(base, "mlp", "http", "json", 1)
            if t1 and b1:
                add(f"vs_{base}_c1_p50", t1["p50_us"] / b1["p50_us"])
        for proto, c in (("http", 16), ("grpc", 16), ("grpc", 64)):
            t, b = g("tritium", "mlp", proto, "bin", c), g("triton", "mlp", proto, "bin", c)
            if t and b:
                add(f"vs_triton_{proto}_c{c}", t["infer_per_s"] / b["infer_per_s"])
                add(f"vs_triton_{proto}_c{c}_p99", t["p99_us"] / b["p99_us"])
        t, b = g("tritium", "add_sub", "http", "bin", 1), g("triton", "add_sub", "http", "bin", 1)
        if t and b:
            add("add_sub_p50", t["p50_us"] / b["p50_us"])
        f = g("floor", "add_sub", "http", "bin", 1)
        if f and b:
            add("floor_vs_triton_add_sub_p50", f["p50_us"] / b["p50_us"])
        if f and t:
            add("add_sub_p50_vs_floor", t["p50_us"] / f["p50_us"])
        t, fg = g("tritium", "add_sub", "grpc", "bin", 1), g("floor_grpc", "add_sub", "grpc", "bin", 1)
        if t and fg:
            add("add_sub_grpc_p50_vs_floor", t["p50_us"] / fg["p50_us"])
        b = g("triton", "add_sub", "grpc", "bin", 1)
        if t and b:
            add("add_sub_grpc_p50", t["p50_us"] / b["p50_us"])

    def cell(name, digits=2):
        xs = ratios.get(name)
        if not xs:
            return "not measured", None
        return f"{median(xs):.{digits}f} ({spread(xs)})", median(xs)

    targets = [
        ("Tritium best-config saturation ÷ ceiling's best items/s", "sat_vs_ceiling", "≥ 0.9", lambda m: m >= 0.9),
        ("  … with batch-1 clients only", "sat_b1_vs_ceiling", "(≥ 0.9)", lambda m: m >= 0.9),
        ("Tritium ÷ Flask, mlp HTTP JSON c16 infer/s", "vs_flask_c16", "≥ 8", lambda m: m >= 8),
        ("Tritium ÷ FastAPI, mlp HTTP JSON c16 infer/s", "vs_fastapi_c16", "(≥ 8, as Flask)", lambda m: m >= 8),
        ("Tritium ÷ Triton 2.51, mlp HTTP c16 infer/s", "vs_triton_http_c16", "≥ 3 at ≤ p99", None),
        ("  … p99 Tritium ÷ Triton, HTTP c16", "vs_triton_http_c16_p99", "≤ 1", lambda m: m <= 1),
        ("Tritium ÷ Triton 2.51, mlp gRPC c16 infer/s", "vs_triton_grpc_c16", "≥ 3 at ≤ p99", None),
        ("  … p99 Tritium ÷ Triton, gRPC c16", "vs_triton_grpc_c16_p99", "≤ 1", lambda m: m <= 1),
        ("Tritium ÷ Triton 2.51, mlp gRPC c64 infer/s (saturation)", "vs_triton_grpc_c64", "(≥ 3)", None),
        ("add_sub HTTP c1 p50 Tritium ÷ Triton 2.51", "add_sub_p50", "≤ 0.3", lambda m: m <= 0.3),
        ("  … floor server ÷ Triton 2.51 (the least any server answers perf_analyzer in here)",
         "floor_vs_triton_add_sub_p50", "(≤ 0.3)", lambda m: m <= 0.3),
        ("  … Tritium ÷ floor server", "add_sub_p50_vs_floor", "≤ 1.3", lambda m: m <= 1.3),
        ("add_sub gRPC c1 p50 Tritium ÷ Triton 2.51", "add_sub_grpc_p50", "-", lambda m: True),
        ("  … Tritium ÷ gRPC floor server", "add_sub_grpc_p50_vs_floor", "≤ 1.3", lambda m: m <= 1.3),
    ]
    tlines = [f"Measured by `loadtests/targets.py` ({stamp}), server built from {header['server_built_from']}; "
              f"{len(reps)} repeats, every subject in every repeat (order rotated), ratio per repeat, "
              "median (min–max). Details in the targets section below.", "",
              "| target | measured ratio, median (min–max) | target | met? |", "| --- | --- | --- | --- |"]
    for title, key, target, ok in targets:
        text, m = cell(key)
        if m is None:
            met = "-"
        elif ok is None:
            p99 = ratios.get(key + "_p99")
            met = ("yes" if m >= 3 and p99 and median(p99) <= 1 else
                   f"no (at {m / 3:.2f}× the target" + (f", p99 ratio {median(p99):.2f}" if p99 else "") + ")")
        else:
            met = "yes" if ok(m) else "no"
            if key == "add_sub_grpc_p50":
                met = "-"
            elif not ok(m) and key.startswith("sat_"):
                met = f"no (at {m / 0.9:.2f}× the target)"
            elif not ok(m) and key.startswith("vs_f"):
                met = f"no (at {m / 8:.2f}× the target)"
            elif not ok(m) and key in ("add_sub_p50", "floor_vs_triton_add_sub_p50"):
                met = f"no ({m / 0.3:.2f}× the target latency ratio)"
        tlines.append(f"| {title} | {text} | {target} | {met} |")
    tlines += why_lines(runs, ceiling)
    if extra.get("best"):
        tlines += ["", f"Tritium's best configuration per repeat (the highest mlp infer/s among its runs): "
                   f"{', '.join(extra['best'])}."]

    lines = [f"# Targets: Tritium vs the ONNX Runtime ceiling, Flask, FastAPI and Triton 2.51 ({stamp})", "",
             f"perf_analyzer {common.PA_VERSION}, server built from {header['server_built_from']}, git HEAD "
             f"{header['git_head'][:12]}, load average {header['loadavg_at_start']:.2f} at start on "
             f"{header['nproc']} cores. Batch 1 per request, random data, -p {args.interval_ms} ms -s "
             f"{args.stability} (retried at {2 * args.stability}); {args.repeats} repeats, every subject once "
             "per repeat with the order rotated; all servers stay up for the whole run (idle while another "
             "is measured), perf_analyzer shares the 2 cores with the server under test.", "",
             "Subjects: **ceiling** = `loadtests/ceiling` (Rust, `ort` rc.15 load-dynamic, ONNX Runtime 1.31.1, "
             f"the same session setup as Tritium's ONNX backend, intra-op threads "
             f"{args.ceiling_intra_threads or 'ORT default'}; input copied into a fresh ORT tensor and the output "
             f"copied out per run; {args.ceiling_seconds} s per batch size); **tritium** = the bundled mlp config "
             "(dynamic batching, preferred 8/16/32, 200 µs, 1 instance, ORT default threads); "
             f"**flask** = gunicorn {args.baseline_workers} workers × gthread 2 threads; **fastapi** = uvicorn "
             f"{args.baseline_workers} workers, uvloop + httptools; both onnxruntime 1.31.1 with "
             f"{args.baseline_intra_threads} intra-op thread per worker; **triton** = real Triton 2.51 (nvidia-pytriton "
             "0.7.0), python backend, mlp through onnxruntime 1.31.1 in `model.py` (config below), add_sub in "
             "python; **floor** = `loadtests/ceiling/src/bin/floor.rs`, actix-web answering add_sub in the "
             "request's own handler (no scheduler, no instance thread, no statistics); **floor_grpc** = "
             "`loadtests/ceiling/src/bin/floor_grpc.rs`, the same over gRPC (tonic).", ""]
    lines += ["## Targets", ""] + tlines[2:] + [""]
    # ceiling
    if ceiling:
        lines += ["## Ceiling: mlp in-process through ONNX Runtime (`ort`)", "",
                  "| batch | items/s median (min–max) | run p50 µs | run p99 µs |", "| --- | --- | --- | --- |"]
        for b in (1, 8, 32, 64):
            xs = [c["batches"][b] for c in ceiling if b in c["batches"]]
            if xs:
                lines.append(f"| {b} | {median(x['items_per_s'] for x in xs):.0f} ({spread(x['items_per_s'] for x in xs)}) | "
                             f"{median(x['p50_us'] for x in xs):.0f} | {median(x['p99_us'] for x in xs):.0f} |")
        lines.append("")
    # per-subject table
    lines += ["## Every measured configuration", "",
              "Server-side columns (µs per request, from the statistics extension over perf_analyzer's windows; "
              "Flask/FastAPI/floor have none): queue, compute input, compute infer, compute output. Batch eff. = "
              "inference_count / execution_count over the run. CPU µs/inf: the server's process tree and "
              "perf_analyzer, CPU time over the whole perf_analyzer run ÷ its infer/s. tensors `bin-bN`: "
              "binary tensors, N items per request (perf_analyzer -b N).", "",
              "| subject | model | protocol | tensors | c | infer/s median (min–max) | p50 µs | p99 µs (min–max) | "
              "queue µs | comp. in µs | comp. infer µs | comp. out µs | batch eff. | busy % | server CPU µs/inf | "
              "client CPU µs/inf |",
              "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    keys = []
    for s in SUBJECTS:
        for p in PLAN.get(s, []):
            keys.append((s,) + p)
    for s, model, proto, fmt, c in keys:
        xs = [r for r in runs if (r["subject"], r["model"], r["protocol"], r["fmt"], r["concurrency"]) ==
              (s, model, proto, fmt, c)]
        if not xs:
            continue
        has_server = s not in NO_STATS
        sv = (lambda k: f"{median(r[k] for r in xs):.0f}") if has_server else (lambda k: "-")
        be = f"{median(r.get('batch_efficiency', 0) for r in xs):.2f}" if has_server else "-"
        lines.append(f"| {s} | {model} | {proto} | {fmt} | {c} | {median(r['infer_per_s'] for r in xs):.0f} "
                     f"({spread(r['infer_per_s'] for r in xs)}) | {median(r['p50_us'] for r in xs):.0f} | "
                     f"{median(r['p99_us'] for r in xs):.0f} ({spread(r['p99_us'] for r in xs)}) | "
                     f"{sv('server_queue_us')} | {sv('server_compute_input_us')} | "
                     f"{sv('server_compute_infer_us')} | {sv('server_compute_output_us')} | {be} | "
                     f"{f'{median(busy(r) for r in xs):.0f}' if has_server else '-'} | "
                     f"{cpu_cell(xs, 'server_cores')} | {cpu_cell(xs, 'client_cores')} |")
    lines += ["", "busy % = the share of wall time the model instance spent in compute input + infer + output: "
              "executions/s (infer/s ÷ batch eff.) × those per-request times (each request is credited with its "
              "whole batch's times), summed over instances (up to 100 % per instance). Near 100 %: the instance is the bottleneck; well below: requests do not reach "
              "it fast enough (HTTP/gRPC handling, the client on the same 2 cores).", ""]
    # where the latency goes, perf_analyzer's split of the average latency
    lines += ["## Where the time goes (average latency split by perf_analyzer, µs per request)", "",
              "| subject | model | protocol | c | avg latency | client send | network + server outside stats | "
              "server queue | server compute (in + infer + out) | client recv |",
              "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for s, model, proto, fmt, c in keys:
        if s in NO_STATS or (model, c) not in (("add_sub", 1), ("mlp", 16), ("mlp", 64)) or fmt != "bin":
            continue
        xs = [r for r in runs if (r["subject"], r["model"], r["protocol"], r["fmt"], r["concurrency"]) ==
              (s, model, proto, fmt, c) and "avg_latency_us" in r]
        if not xs:
            continue
        m = lambda k: median(r.get(k, 0) for r in xs)  # noqa: E731
        comp = median(r["server_compute_input_us"] + r["server_compute_infer_us"] + r["server_compute_output_us"]
                      for r in xs)
        lines.append(f"| {s} | {model} | {proto} | {c} | {m('avg_latency_us'):.0f} | {m('client_send_us'):.0f} | "
                     f"{m('network_server_us'):.0f} | {m('server_queue_us'):.0f} | {comp:.0f} | "
                     f"{m('client_recv_us'):.0f} |")
    lines.append("")
    # all ratios
    lines += ["## Ratios within each repeat", "", "| ratio | " + " | ".join(f"rep {r}" for r in reps) +
              " | median | min–max |", "| --- |" + " --- |" * (len(reps) + 2)]
    for name in sorted(ratios):
        xs = ratios[name]
        cells = [f"{per_rep[name][r]:.3f}" if r in per_rep[name] else "-" for r in reps]
        lines.append(f"| {name} | " + " | ".join(cells) + f" | {median(xs):.3f} | {spread(xs)} |")
    lines += ["", "(`sat_vs_ceiling`: Tritium's highest mlp infer/s in the repeat ÷ the ceiling's highest items/s "
              "in the same repeat; `vs_X_cN`: Tritium infer/s ÷ X's; `_p99`/`_p50`: latency ratios, lower is "
              "better for Tritium.)", ""]
    if triton_cfg:
        lines += ["Triton's mlp config (the python model is `loadtests/triton_ref/mlp_onnx/model.py`):", "",
                  "```", triton_cfg.rstrip(), "```", ""]
    lines += [f"Failed runs: {len(failures)}" + ("" if not failures else ":")]
    lines += [f"- {f['run']}: {f['error'][:300]}" for f in failures]
    summary = {"header": header, "args": vars(args), "runs": runs, "ceiling": ceiling, "ratios": per_rep,
               "failures": failures}
    common.write_summary(out_dir, summary, lines)
    with open(os.path.join(out_dir, "targets.md"), "w") as f:
        f.write("\n".join(tlines) + "\n")
