#!/usr/bin/env bash
# Runs every load test once and writes loadtests/RESULTS.md.
#
#   loadtests/run_all.sh            # uses the release binary already at $SERVER
#   loadtests/run_all.sh --build    # first builds HEAD in a throw-away git worktree
#   loadtests/run_all.sh [--build] --only targets.py,batching.py   # only these scripts; the
#                                   # other sections of the previous RESULTS.md are kept, marked
#
# Steps: loadtests/setup.sh (perf_analyzer 2.50.0); optionally the release build of HEAD
# (CARGO_TARGET_DIR=/tmp/tritium-bench-target, the commit recorded in $SERVER.commit); then
# json_vs_binary.py, json_vs_binary_interleaved.py, grpc_vs_http.py, sequences.py, batching.py,
# minilm.py, targets.py (after triton_ref/setup.sh: real Triton for its side-by-side runs),
# each writing its folder under loadtests/out/run_all-<time>/; then collect_results.py gathers
# their summary.md files into loadtests/RESULTS.md. A script that fails is listed there and the
# others still run. Takes 30-55 minutes on a 2-core machine (targets.py and batching.py ~10
# each).
set -uo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(dirname "$HERE")"
PY="${PY:-$ROOT/.venv/bin/python}"
SERVER="${SERVER:-/tmp/tritium-bench-target/release/tritium}"
ORT="${ORT:-$ROOT/.venv/lib/python3.11/site-packages/onnxruntime/capi/libonnxruntime.so.1.31.1}"

BUILD=0 ONLY=""
while [ $# -gt 0 ]; do
  case "$1" in
    --build) BUILD=1 ;;
    --only) ONLY="${2:?--only needs a comma-separated list of scripts}"; shift ;;
    -h|--help) sed -n '2,16p' "$0"; exit 0 ;;
    *) echo "unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
  shift
done

"$HERE/setup.sh" || { echo "setup.sh failed" >&2; exit 1; }

if [ "$BUILD" = 1 ]; then
  WT="/tmp/tritium-bench-runall-$$"
  git -C "$ROOT" worktree add --detach "$WT" HEAD || exit 1
  commit="$(git -C "$WT" rev-parse HEAD)"
  (cd "$WT" && CARGO_TARGET_DIR="$(dirname "$(dirname "$SERVER")")" nice cargo build --release --locked \
     -p tritium -p tritium-ceiling)
  rc=$?
  git -C "$ROOT" worktree remove --force "$WT"
  [ "$rc" = 0 ] || { echo "release build failed" >&2; exit 1; }
  echo "$commit" > "$SERVER.commit"
fi
[ -x "$SERVER" ] || { echo "no server binary at $SERVER (run with --build, or see README.md)" >&2; exit 1; }
[ -x "$PY" ] || { echo "no Python at $PY (run scripts/setup.sh)" >&2; exit 1; }

RUN="$HERE/out/run_all-$(date +%Y%m%d-%H%M%S)"
mkdir -p "$RUN"
started="$(date '+%Y-%m-%d %H:%M:%S %Z')"
load_start="$(cut -d' ' -f1 /proc/loadavg)"
failed=()
COMMON=(--server "$SERVER" --onnxruntime-library "$ORT" --out "$RUN")

run() {  # run NAME ARGS...: one script, console to $RUN/NAME.console
  local name="$1"; shift
  if [ -n "$ONLY" ] && [[ ",$ONLY," != *",$name,"* ]]; then return 0; fi
  echo "loadtests/$name ${*}" | sed "s#$RUN#loadtests/out/run_all-…#g; s#$ROOT/##g" >> "$RUN/commands.txt"
  echo "=== $name $*"
  "$PY" "$HERE/$name" "$@" "${COMMON[@]}" 2>&1 | tee "$RUN/${name%.py}.console"
  local rc="${PIPESTATUS[0]}"
  echo "# exit $rc" >> "$RUN/commands.txt"
  [ "$rc" = 0 ] || failed+=("$name (exit $rc)")
}

echo "loadtests/setup.sh" > "$RUN/commands.txt"
run json_vs_binary.py --repeats 3
run json_vs_binary_interleaved.py --repeats 3 --requests 10000
run grpc_vs_http.py --repeats 3
run sequences.py
run batching.py --repeats 2 --protocols http,grpc --concurrency 1,4,16,64
run minilm.py --repeats 2
if [ -z "$ONLY" ] || [[ ",$ONLY," == *",targets.py,"* ]]; then
  echo "loadtests/triton_ref/setup.sh" >> "$RUN/commands.txt"
  if "$HERE/triton_ref/setup.sh" > "$RUN/triton_ref_setup.log" 2>&1; then
    run targets.py --repeats 3
  else
    echo "# triton_ref/setup.sh failed: targets.py without real Triton" >> "$RUN/commands.txt"
    run targets.py --repeats 3 --skip triton
  fi
fi

head="$(git -C "$ROOT" rev-parse HEAD 2>/dev/null || echo unknown)"
"$PY" - "$RUN" "$SERVER" "$ORT" "$started" "$load_start" "$head" "${failed[@]+"${failed[@]}"}" <<'PYEOF'
import json, os, sys, time
run, server, ort, started, load_start, head, *failed = sys.argv[1:]
json.dump({"started": started, "finished": time.strftime("%Y-%m-%d %H:%M:%S %Z"), "server": server,
           "onnxruntime_library": ort, "git_head": head, "nproc": os.cpu_count(),
           "loadavg_start": load_start, "loadavg_end": f"{os.getloadavg()[0]:.2f}", "failed": failed},
          open(os.path.join(run, "meta.json"), "w"), indent=2)
PYEOF
KEEP=()
[ -n "$ONLY" ] && [ -f "$HERE/RESULTS.md" ] && KEEP=(--keep-from "$HERE/RESULTS.md")
"$PY" "$HERE/collect_results.py" "$RUN" "${KEEP[@]+"${KEEP[@]}"}" > "$HERE/RESULTS.md.new" \
  && mv "$HERE/RESULTS.md.new" "$HERE/RESULTS.md" || exit 1
echo "wrote $HERE/RESULTS.md (raw results in $RUN)"
[ "${#failed[@]}" = 0 ]
