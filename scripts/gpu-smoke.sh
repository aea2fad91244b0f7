#!/usr/bin/env bash
# The first thing to run on a GPU machine: does PopuLoRA work here? A few minutes, one pass/fail table.
#   1. CUDA and the device (torch's view)           4. the vLLM backend, if vLLM is installed
#   2. tests/platform/test_devices.py on the real GPU        5. a 5-problem HumanEval+ evaluation of the base
#   3. a 2-step population in bf16, multilora
# Usage: scripts/gpu-smoke.sh [MODEL]   (MODEL: model.base, default: embedded; e.g. Qwen/Qwen2.5-0.5B-Instruct)
# Env: PYTHON (default: .venv/bin/python, else python3), SMOKE_DIR (default: a temp dir; kept on failure).
set -uo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-$( [ -x .venv/bin/python ] && echo .venv/bin/python || echo python3 )}
MODEL=${1:-embedded}
DIR=${SMOKE_DIR:-$(mktemp -d -t populora-gpu-smoke.XXXX)}
export MLFLOW_TRACKING_URI="sqlite:///$DIR/mlflow.db" POPULORA_TEST_DEVICE=cuda
RESULTS=()
FAILED=0

check() {  # check NAME COMMAND...: run it, log to $DIR/NAME.log, record pass/fail/skip and seconds
  local name=$1; shift
  local t0=$SECONDS status
  if "$@" >"$DIR/$name.log" 2>&1; then status=pass; else status=FAIL; FAILED=1; fi
  RESULTS+=("$(printf '%-22s %-5s %6ss   %s' "$name" "$status" "$((SECONDS - t0))" "$DIR/$name.log")")
}
skip() { RESULTS+=("$(printf '%-22s %-5s %6s    %s' "$1" skip - "$2")"); }

check cuda "$PY" -c "
import torch
assert torch.cuda.is_available(), 'torch sees no CUDA device (CPU build of torch? driver?)'
p = torch.cuda.get_device_properties(0)
print(f'torch {torch.__version__}, CUDA {torch.version.cuda}, {torch.cuda.device_count()} GPU(s): {p.name}, '
      f'{p.total_memory / 2**30:.0f} GiB, bf16: {torch.cuda.is_bf16_supported()}')"
cat "$DIR/cuda.log"

check device-tests "$PY" -m pytest -q tests/platform/test_devices.py -p no:cacheprovider --timeout=900

COMMON=(--set "model.base=$MODEL" --set model.dtype=bfloat16 --set model.device=cuda --set steps=2
        --set population.teachers=2 --set population.students=2 --set evolution.every=2
        --set output_dir="$DIR/runs" --quiet)
check train-bf16-multilora "$PY" -m populora.cli train --config configs/smoke.yaml --set model.backend=multilora "${COMMON[@]}"

if "$PY" -c "import vllm" 2>/dev/null; then
  check train-vllm "$PY" -m populora.cli train --config configs/smoke.yaml --set model.generation=vllm "${COMMON[@]}"
else
  skip train-vllm "vLLM not installed (pip install 'populora[vllm]')"
fi

check eval-5-problems "$PY" -m populora.cli eval --base-only --model "$MODEL" --device cuda \
  --benchmarks humaneval_plus --limit 5 --out "$DIR/eval"

echo
printf '%-22s %-5s %7s   %s\n' check result time log
printf '%s\n' "${RESULTS[@]}"
[ "$FAILED" = 0 ] && echo "all checks passed" || echo "some checks FAILED: read their logs above (kept in $DIR)"
exit "$FAILED"
