"""The real vLLM engine (vLLM's CPU build, `make test-vllm`): only .venv-vllm runs these; the main venv never
collects this folder (pyproject ``norecursedirs``)."""

import populora  # noqa: F401  (first: it sets OMP_WAIT_POLICY before torch loads; the trainer's decoding
#                  in this process took minutes instead of seconds on a loaded 2-core machine without it)
