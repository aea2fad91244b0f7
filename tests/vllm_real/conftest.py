"""The real vLLM engine (vLLM's CPU build, `make test-vllm`): only .venv-vllm runs these; the main venv never
collects this folder (pyproject ``norecursedirs``)."""

import os

import populora  # noqa: F401  (first: it sets OMP_WAIT_POLICY before torch loads; the trainer's decoding
#                  in this process took minutes instead of seconds on a loaded 2-core machine without it)

# vLLM on CPU sizes its KV cache from this (GiB; default 4): 1 holds our few short rows, and leaves room for
# the trainer's copy of the model beside the engine on a small CI machine
os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
