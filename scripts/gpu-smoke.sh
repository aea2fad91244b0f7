#!/usr/bin/env bash
# The GPU acceptance test: does the paper-scale path work on this box? Prints one JSON line of results and exits
# non-zero if any check fails. Run it in the GPU image (docker/Dockerfile.gpu) or a venv with ".[ray,vllm,test]".
usage() {
  cat <<'EOF'
Usage: scripts/gpu-smoke.sh [--model MODEL] [--checks abcdef] [--quick] [--help]

Checks (each a pass / fail / skip with seconds and figures in the JSON line):
  (a) distinct rollouts: 4 identical prompts at temperature 1 through VllmBackend.generate give >= 2 distinct
      completions (per-row vLLM seeds)
  (b) log-prob agreement: the trainer's log-probs of vLLM's own samples under a non-zero adapter match vLLM's
      (mean |diff| < 0.05): catches stale or mis-scaled adapters in vLLM
  (c) one step of configs/paper-4t4s.yaml on the real base (or --model), seeding cut to 16 tasks per kind;
      prints peak GPU memory (torch's and the whole device's) against `populora plan`
  (d) a Ray run with 2 model workers x 1 GPU each, when 2 GPUs are visible (else skip): distinct GPUs per
      worker, results back on the CPU
  (e) the device tests (tests/platform/test_devices.py, bf16 included) on the real GPU
  (f) a data-parallel step (ray.placement=data_parallel) on 2 GPUs when 2 are visible (else skip): one vLLM
      engine per worker, every worker generates and trains, adapters identical on both after the NCCL all-reduce

Options:
  --model MODEL   model.base for (a)-(d) and (f) (default Qwen/Qwen2.5-7B, the paper presets' base)
  --checks LIST   run only these checks, e.g. --checks ae (default abcdef)
  --quick         (c) with 4 tasks per teacher instead of 32 (same memory peak, ~1/8 of the step)
Env: PYTHON (default .venv/bin/python, else python3), SMOKE_DIR (logs and run dirs; default a temp dir, kept).
Needs: NVIDIA driver >= 580 (torch 2.14's CUDA 13 wheels), vLLM installed, HF access or HF_HOME holding MODEL.
EOF
}

set -uo pipefail
cd "$(dirname "$0")/.."
MODEL=Qwen/Qwen2.5-7B CHECKS=abcdef QUICK=()
while [ $# -gt 0 ]; do
  case "$1" in
    -h|--help) usage; exit 0 ;;
    --model) MODEL=$2; shift 2 ;;
    --checks) CHECKS=$2; shift 2 ;;
    --quick) QUICK=(--quick); shift ;;
    *) echo "unknown argument: $1 (see --help)" >&2; exit 2 ;;
  esac
done
PY=${PYTHON:-$( [ -x .venv/bin/python ] && echo .venv/bin/python || echo python3 )}
DIR=${SMOKE_DIR:-$(mktemp -d -t populora-gpu-smoke.XXXX)}
mkdir -p "$DIR"
export MLFLOW_TRACKING_URI="sqlite:///$DIR/mlflow.db"
: > "$DIR/results.jsonl"

run() {  # run LOG COMMAND...: the command's JSON result lines go to results.jsonl, everything to LOG
  local log=$1; shift
  "$@" >"$DIR/$log.log" 2>&1
  grep '^{"check"' "$DIR/$log.log" >> "$DIR/results.jsonl"
}
wants() { case "$CHECKS" in *"$1"*) return 0 ;; *) return 1 ;; esac; }

if wants a || wants b; then run vllm "$PY" scripts/gpu_smoke.py vllm --model "$MODEL" --out "$DIR/runs"; fi
if wants c; then run step "$PY" scripts/gpu_smoke.py step --model "$MODEL" --out "$DIR/runs" "${QUICK[@]}"; fi
if wants d; then run ray "$PY" scripts/gpu_smoke.py ray --model "$MODEL" --out "$DIR/runs"; fi
if wants f; then  # guarded by the visible GPU count: one GPU (or none) skips rather than fails
  n_gpus=$("$PY" -c "import torch; print(torch.cuda.device_count())" 2>/dev/null || echo 0)
  if [ "${n_gpus:-0}" -ge 2 ]; then
    run dp "$PY" scripts/gpu_smoke.py dp --model "$MODEL" --out "$DIR/runs"
  else
    printf '{"check": "f", "status": "skip", "seconds": 0, "reason": "%s GPU visible; the data-parallel step needs 2"}\n' \
      "${n_gpus:-0}" >> "$DIR/results.jsonl"
  fi
fi
if wants e; then
  t0=$SECONDS
  if ! "$PY" -c "import torch, sys; sys.exit(not torch.cuda.is_available())" 2>/dev/null; then
    status=fail reason="torch sees no CUDA GPU: the device tests would only run on the meta device"
  elif POPULORA_TEST_DEVICE=cuda "$PY" -m pytest -q tests/platform/test_devices.py -p no:cacheprovider --timeout=900 \
       >"$DIR/device-tests.log" 2>&1; then status=pass reason=""; else status=fail reason="see $DIR/device-tests.log"; fi
  printf '{"check": "e", "status": "%s", "seconds": %d, "reason": "%s"}\n' "$status" "$((SECONDS - t0))" "$reason" \
    >> "$DIR/results.jsonl"
fi

# one JSON line: {"passed": bool, "model": ..., "dir": ..., "checks": {"a": {...}, ...}}; a check that printed
# nothing (a crash before its first line) counts as failed
"$PY" - "$DIR" "$MODEL" "$CHECKS" <<'EOF'
import json, sys
from pathlib import Path
out, model, wanted = Path(sys.argv[1]), sys.argv[2], sys.argv[3]
checks = {}
for line in (out / "results.jsonl").read_text().splitlines():
    r = json.loads(line)
    name = r.pop("check")
    if name in wanted:  # (a) and (b) share one engine: --checks a still runs b
        checks[name] = r
for name in wanted:
    checks.setdefault(name, {"status": "fail", "reason": f"no result: read {out}/*.log"})
passed = all(c["status"] != "fail" for c in checks.values())
print(json.dumps({"passed": passed, "model": model, "dir": str(out), "checks": dict(sorted(checks.items()))}))
sys.exit(0 if passed else 1)
EOF
