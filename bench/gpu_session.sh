#!/usr/bin/env bash
# The one device call of a lent GPU (five minutes: twice within 15 minutes of device time, machine starts included):
# install the carried wheels, start mamba_ssm's selective-scan build in the background, check every kernel, run
# bench/gpu.py's session rows within what is left (each its own seconds: batch-1 generation, the compressed forward,
# LOMO + NeuZip training at llama-1b, the decode, explain at 2048 tokens, the scan against mamba_ssm), and print a
# short summary last. Everything it writes goes under $OUT (at most 8 files).
#
#   bash bench/gpu_session.sh                 # on the device, from the repository root (run it with timeout_s ~330)
#   bash bench/gpu_session.sh --smoke         # a dry run on the CPU: the same steps on the interpreter, tiny rows
#
# Options (or the environment variables in brackets):
#   --total S          seconds the whole call may take, summary included (LAYERWISE_SESSION_S, default 300)
#   --wheels DIR       wheels to install with pip --no-index --no-deps --target (default .whl)
#   --build-script F   build_cuda_ext.py (LAYERWISE_BUILD_SCRIPT, default .gpu/build_cuda_ext.py)
#   --mamba-sdist P    mamba-ssm's sdist, .tar.gz or extracted folder (LAYERWISE_MAMBA_SDIST, default
#                      .gpu/mamba_ssm-*.tar.gz); without it, or without nvcc, the mamba_ssm row is skipped
#   --rows LIST        bench/gpu.py rows (--only), default session; all for every row (smoke: neuzip_decode,
#                      selective_scan_vs_mamba_ssm)
#
# Only mamba_ssm's selective_scan extension is built (about 3 minutes on 16 cores; causal_conv1d would take 8 and
# is not needed: the scan row calls selective_scan_fn, or selective_scan_cuda directly), and only when the rows
# include selective_scan_vs_mamba_ssm (--rows without it leaves all the cores to the bench). The build runs niced
# with 4 cores left to the benchmark; the bench waits for it (its marker file) only while its budget allows.
# Files in $OUT: session.log (all output), env.txt, kernels-check.json, build.log, gpu.json (written after every
# row), summary.txt. (LAYERWISE_SESSION_BUILD=1 runs the build even in --smoke: tests/bench/test_gpu_session.py
# drives a stand-in build script through it.)
set -u
cd "$(dirname "$0")/.." || exit 2

SMOKE=0
TOTAL=${LAYERWISE_SESSION_S:-300}
WHEELS=.whl
BUILD=${LAYERWISE_BUILD_SCRIPT:-.gpu/build_cuda_ext.py}
SDIST=${LAYERWISE_MAMBA_SDIST:-$(ls -d .gpu/mamba_ssm-* 2>/dev/null | head -n 1)}
ROWS=""
while [ $# -gt 0 ]; do
  case "$1" in
    --smoke) SMOKE=1 ;;
    --total) TOTAL=$2; shift ;;
    --wheels) WHEELS=$2; shift ;;
    --build-script) BUILD=$2; shift ;;
    --mamba-sdist) SDIST=$2; shift ;;
    --rows) ROWS=$2; shift ;;
    -h|--help) sed -n '2,26p' "$0"; exit 0 ;;
    *) echo "gpu_session.sh: unknown option $1 (see --help)" >&2; exit 2 ;;
  esac
  shift
done
if [ "$SMOKE" = 1 ] && [ -z "$ROWS" ]; then ROWS=neuzip_decode,selective_scan_vs_mamba_ssm; fi
[ -z "$ROWS" ] && ROWS=session  # bench/gpu.py's SESSION rows
NEEDS_MAMBA=1  # the scan-vs-mamba_ssm row is planned (the session's rows, all rows, or --rows names it)
case ",$ROWS," in *,session,*|*,all,*|*,selective_scan_vs_mamba_ssm,*) ;; *) NEEDS_MAMBA=0 ;; esac

OUT=${OUT:-artifacts/gpu-session}
mkdir -p "$OUT"
WORK=$(mktemp -d "${TMPDIR:-/tmp}/layerwise-session.XXXXXX")
SITE=$WORK/site          # the carried wheels
EXT=$WORK/cuda_ext       # mamba_ssm's package and its built selective_scan_cuda
READY=$EXT/.selective_scan_ready
mkdir -p "$SITE" "$EXT"
export PYTHONPATH="$SITE:$EXT:$PWD${PYTHONPATH:+:$PYTHONPATH}"
export PATH="$SITE/bin:$PATH"
left() { echo $(( TOTAL - SECONDS )); }
say() { echo "=== [$(printf '%3d' "$SECONDS") s] $*"; }

session() {
# ---- 0. what machine is this ------------------------------------------------------------------------------------
{
  date -u
  (timeout 10 nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv 2>&1 || true)
  echo "cores: $(nproc)"
  timeout 60 python -c "import sys, torch, triton, transformers, numba; print('python', sys.version.split()[0], \
'torch', torch.__version__, 'cuda', torch.version.cuda, 'triton', triton.__version__, 'transformers', \
transformers.__version__, 'numba', numba.__version__); print('device', torch.cuda.get_device_name() if \
torch.cuda.is_available() else 'none (CPU)')" 2>&1
  (command -v nvcc >/dev/null && nvcc --version | tail -n 2) || echo "nvcc: not found"
} > "$OUT/env.txt" 2>&1
say "machine"; cat "$OUT/env.txt"

# ---- 1. carried wheels ------------------------------------------------------------------------------------------
if ls "$WHEELS"/*.whl >/dev/null 2>&1; then
  say "installing $(ls "$WHEELS"/*.whl | wc -l) wheels into $SITE"
  PIP_ROOT_USER_ACTION=ignore timeout 120 python -m pip install --no-index --no-deps --target "$SITE" --quiet \
    --disable-pip-version-check "$WHEELS"/*.whl || echo "wheel install failed (exit $?)"
else
  say "no wheels in $WHEELS"
fi

# ---- 2. mamba_ssm's selective scan, built in the background -----------------------------------------------------
BUILD_PID=""
BUILD_STATE="not started"
if [ -n "$SDIST" ] && [ -e "$SDIST" ] && [ -f "$BUILD" ]; then
  SRC=$SDIST
  if [ -f "$SDIST" ]; then
    tar -xzf "$SDIST" -C "$WORK" && SRC=$(ls -d "$WORK"/mamba_ssm-*/ | head -n 1)
  fi
  CHECK="import importlib.util, os, sys
spec = importlib.util.spec_from_file_location('build_cuda_ext', sys.argv[1]); b = importlib.util.module_from_spec(spec)
spec.loader.exec_module(b)
csrc = os.path.join(sys.argv[2], 'csrc', 'selective_scan')
missing = [f for f in b.SCAN if not os.path.exists(os.path.join(csrc, f))]
assert not missing, f'not in the sdist: {missing}'
assert os.path.isdir(os.path.join(sys.argv[2], 'mamba_ssm')), 'no mamba_ssm package in the sdist'
print('build script and sdist usable:', len(b.SCAN), 'sources')"
  if ! python -c "$CHECK" "$BUILD" "$SRC" > "$OUT/build.log" 2>&1; then
    BUILD_STATE="unusable build script or sdist (build.log)"
  elif [ "$NEEDS_MAMBA" = 0 ]; then
    BUILD_STATE="not needed: --rows names no selective_scan_vs_mamba_ssm ($(tail -n 1 "$OUT/build.log")); not built"
  elif [ "${LAYERWISE_SESSION_BUILD:-0}" != 1 ] && { [ "$SMOKE" = 1 ] || ! command -v nvcc >/dev/null; }; then
    BUILD_STATE="dry run: $(tail -n 1 "$OUT/build.log"); not built ($([ "$SMOKE" = 1 ] && echo smoke || echo 'no nvcc'))"
  else
    JOBS=$(( $(nproc) > 8 ? $(nproc) - 4 : $(nproc) ))
    # the architecture from nvidia-smi: the build creates no CUDA context beside the benchmark's
    ARCH=$(timeout 10 nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -n 1 | tr -d '. ')
    export LAYERWISE_CUDA_ARCH=${ARCH:-90}
    say "building selective_scan_cuda in the background ($JOBS jobs)"
    set -m  # its own process group: stopped as a whole at the end
    (
      export MAX_JOBS=$JOBS
      nice -n 19 python - "$BUILD" "$SRC" "$EXT" <<'PY' && touch "$READY"
import importlib.util, os, sys, time
spec = importlib.util.spec_from_file_location("build_cuda_ext", sys.argv[1])
b = importlib.util.module_from_spec(spec)
spec.loader.exec_module(b)
arch = os.environ["LAYERWISE_CUDA_ARCH"]
os.environ["TORCH_CUDA_ARCH_LIST"] = f"{arch[:-1]}.{arch[-1]}"
src, site = sys.argv[2], sys.argv[3]
b.build("selective_scan_cuda", os.path.join(src, "csrc", "selective_scan"), b.SCAN, os.path.join(src, "mamba_ssm"),
        site, arch)
sys.path.insert(0, site)
import torch  # noqa: F401  (the extension links against it)
import selective_scan_cuda  # noqa: F401  (the marker is written only when it imports)
print("selective_scan_cuda imports", flush=True)
PY
    ) >> "$OUT/build.log" 2>&1 < /dev/null &
    BUILD_PID=$!
    set +m
    BUILD_STATE="running"
  fi
else
  BUILD_STATE="not started: no sdist or build script (--mamba-sdist, --build-script)"
fi
say "mamba_ssm build: $BUILD_STATE"

# ---- 3. every kernel's self-check (numba's CPU codec compiled meanwhile, into its cache for the NeuZip rows) -----
( timeout 120 python -c "import torch
from core.neuzip.codec import compress
ct = compress(torch.randn(8192).to(torch.bfloat16))
ct.decompress(); ct.device_arrays(None, 1024)" > /dev/null 2>&1 ) &
WARM_PID=$!
say "kernels check"
if [ "$SMOKE" = 1 ]; then
  TRITON_INTERPRET=1 timeout 300 python -m core kernels check --device cpu --json > "$OUT/kernels-check.json"
else
  timeout 150 python -m core kernels check --json > "$OUT/kernels-check.json"
fi
CHECK_EXIT=$?
echo "kernels check exit code $CHECK_EXIT"
wait "$WARM_PID"

# ---- 4. the benchmark, in what is left ---------------------------------------------------------------------------
BUDGET=$(( $(left) - 35 ))
[ "$BUDGET" -gt 480 ] && BUDGET=480
BENCH_EXIT="not run"
if [ "$BUDGET" -lt 60 ]; then
  say "only $(left) s left: no benchmark"
else
  say "bench/gpu.py --budget $BUDGET"
  ARGS=(--budget "$BUDGET" --out "$OUT/gpu.json")
  [ "$ROWS" != all ] && ARGS+=(--only "$ROWS")
  [ -n "$BUILD_PID" ] && ARGS+=(--mamba-ready "$READY")
  [ "$SMOKE" = 1 ] && ARGS+=(--smoke --isolate)
  timeout --kill-after=5 $(( BUDGET + 25 )) python bench/gpu.py "${ARGS[@]}" > /dev/null
  BENCH_EXIT=$?
fi

# ---- 5. the build, if still running; the summary ----------------------------------------------------------------
if [ -n "$BUILD_PID" ]; then
  if [ -f "$READY" ]; then BUILD_STATE="built, selective_scan_cuda imports"
  elif kill -0 "$BUILD_PID" 2>/dev/null; then
    kill -- -"$BUILD_PID" 2>/dev/null
    BUILD_STATE="not finished in time (stopped)"
  else BUILD_STATE="failed (build.log)"; fi
fi
python - "$OUT" "$CHECK_EXIT" "$BENCH_EXIT" "$BUILD_STATE" "$SECONDS" > "$OUT/summary.txt" 2>&1 <<'PY'
import json, os, sys
out, check_exit, bench_exit, build, seconds = sys.argv[1:]
lines = [f"session: {seconds} s; mamba_ssm build: {build}"]
try:
    rows = json.load(open(os.path.join(out, "kernels-check.json")))
    bad = [f"{r['kernel']}/{r['dtype']}: {r['reason']}" for r in rows if not r["ok"]]
    lines.append(f"kernels check: {len(rows) - len(bad)} of {len(rows)} pass" + (f"; FAILED {bad}" if bad else ""))
except Exception as exc:
    lines.append(f"kernels check: no result (exit {check_exit}; {type(exc).__name__})")
try:
    report = json.load(open(os.path.join(out, "gpu.json")))
    sys.path.insert(0, "bench")
    from gpu_targets import target_table, targets
    done = {k: v for k, v in report["rows"].items() if "wall_s" in v}
    lines.append(f"bench/gpu.py: exit {bench_exit}, {len(done)} of {len(report['plan'])} rows in "
                 f"{sum(v['wall_s'] for v in done.values()):.0f} s; killed: "
                 f"{[k for k, v in done.items() if v['killed']] or 'none'}; failed: {report['failed'] or 'none'}; "
                 f"skipped: {[k for k, v in report['rows'].items() if 'skipped' in v] or 'none'}")
    lines += ["", target_table(report.get("targets") or targets(report["comparisons"]), report["device"] or "the GPU")]
except Exception as exc:
    lines.append(f"bench/gpu.py: no report (exit {bench_exit}; {type(exc).__name__}: {exc})")
lines.append(f"files in {out}: {', '.join(sorted(os.listdir(out)))}")
print("\n".join(lines))
PY
say "summary"
cat "$OUT/summary.txt"
}

session 2>&1 | tee -a "$OUT/session.log"
rm -rf "$WORK"
