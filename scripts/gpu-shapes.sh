#!/usr/bin/env bash
# One paper-4t4s step at Qwen2.5-7B's shapes with random bf16 weights (no download, no vLLM): phase times and
# torch.cuda.max_memory_allocated() beside `populora plan`'s figures. --dry-run: tiny shapes on the CPU (CI).
# Options are scripts/gpu_shapes.py's (--help). Env: PYTHON (default .venv/bin/python, else python3).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-$( [ -x .venv/bin/python ] && echo .venv/bin/python || echo python3 )}
exec "$PY" scripts/gpu_shapes.py "$@"
