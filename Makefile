# Every target that needs the project creates .venv and installs it first,
# so `make run` / `make test` work on a fresh machine with nothing installed.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
PY     := $(BIN)/python
STAMP  := $(VENV)/.installed-stamp
# The exact versions of the default install (numpy and its OpenBLAS make the bytes),
# per Python version; `make lock` refreshes it. The hf and gpu extras stay unpinned.
LOCK   := requirements.lock
# the `dvc plots show` template with the Vega libraries inside (tools/plots_page.py)
PLOTS_PAGE := build/dvc-plots.html

.PHONY: help setup run test test-sparkbc test-fast spark-sgd-proof spark-sgd-proof-scale \
        sparkbc-e2e repro-check bench clean lock test-hf test-gpu spark-coder-proof spark-coder-proof-dvc \
        readme-figures readme-figures-stable deps test-llama test-browser

help:
	@echo "make run        set up, run the default job (dvc repro), print a summary"
	@echo "make test       set up, run the whole test suite (TEST_WORKERS=2 pytest-xdist workers)"
	@echo "make test-sparkbc   only the SPARK_BC toolchain tests"
	@echo "make test-browser  install Debian's chromium and open the \`dvc plots show\` page in it, offline"
	@echo "make deps          rewrite dvc.yaml's code deps from the import graph (tools/stage_deps.py)"
	@echo "make lock          refresh requirements.lock (uv pip compile --universal), then make setup"
	@echo "make test-hf       install the hf extra (torch, transformers) and run the export proofs"
	@echo "make test-llama    build llama.cpp's Python binding from the registry (~30 min on 2 cores,"
	@echo "                   once) and check the GGUF in it: token ids, greedy text, logits"
	@echo "make test-gpu      install the gpu extra (torch) and run the array-path tests on it;"
	@echo "                   on Linux pip's torch is the CUDA build: ~3.2 GB of NVIDIA libraries,"
	@echo "                   .venv grows to ~5.9 GB (a CPU-only torch installed first is kept)"
	@echo "make spark-sgd-proof        train the default program's tiny job and check it"
	@echo "make spark-sgd-proof-scale  the large-scale proof (5.5 min on 2 quiet cores, 21 min loaded)"
	@echo "make spark-coder-proof  medium code model on the stdlib vs zlib-9 / lzma-9e (bits per byte)"
	@echo "make spark-coder-proof-dvc  the same job through dvc exp run (the same weights bytes)"
	@echo "make sparkbc-e2e   spark run and dvc repro give the same weights"
	@echo "make repro-check   force-repro and diff dvc.lock (copy into your CI)"
	@echo "make bench         tokens/s and model FLOP/s utilisation (tiny, large, the coder proof's job)"
	@echo "make readme-figures  re-measure README's figures (proofs, bench, sweep, tests: about 20 min on a quiet machine)"
	@echo "make readme-figures-stable  only README's reproducible outputs (make run, sweep grids: minutes)"

setup: $(STAMP) $(PLOTS_PAGE)

# The template `dvc plots show` fills (.dvc/config names it): DVC's page with vega,
# vega-lite and vega-embed written in from their npm packages (pinned, sha512-checked),
# so the page draws offline; DVC's own page loads them from a CDN.
# Where npm cannot be had, DVC's own page (online only) rather than a failed set-up.
$(PLOTS_PAGE): tools/plots_page.py | $(STAMP)
	$(PY) tools/plots_page.py $@ || $(PY) tools/plots_page.py --online $@

# The stamp stands only for a .venv of this checkout that works: when .venv is a link
# (another checkout's venv), or its python is missing, dangling, a folder or lacks the
# project or numpy, the stamp is out of date, so `make setup` (and every target that
# needs it) repairs .venv instead of answering "Nothing to be done"; a link is refused
# (installing would point that venv's `spark` at this checkout).
VENV_WORKS := $(shell test ! -L $(VENV) && $(PY) -c "import sparktrain, numpy" >/dev/null 2>&1 && echo yes)
ifneq ($(VENV_WORKS),yes)
.PHONY: $(STAMP)
endif

# uv installs the lock's exact versions in ~15 s where pip takes ~55 s (the same
# packages, checked with pip list); where uv cannot be had or fails, pip does it.
$(STAMP): pyproject.toml $(LOCK)
	@test ! -L $(VENV) || { echo "make: $(VENV) is a link (to $$(readlink $(VENV))); this checkout installs only into a .venv of its own: remove the link (rm $(VENV)) and run make setup" >&2; exit 2; }
	$(PY) -c "" 2>/dev/null || $(PYTHON) -m venv --clear $(VENV)
	( $(PY) -m pip install -q uv && $(BIN)/uv pip install -q --python $(PY) -c $(LOCK) -e '.[dev,sweep]' ) \
	  || ( $(PY) -m pip install -q --upgrade pip && $(PY) -m pip install -q -c $(LOCK) -e '.[dev,sweep]' )
	touch $(STAMP)

# Every Python the project supports (>= 3.10), one file; then reinstall with it.
lock:
	$(PY) -c "" 2>/dev/null || $(PYTHON) -m venv --clear $(VENV)
	$(PY) -m pip install -q uv
	$(BIN)/uv pip compile -q --no-python-downloads --universal --python-version 3.10 --extra dev --extra sweep \
		pyproject.toml -o $(LOCK)
	$(MAKE) setup

# pytest-xdist: TEST_WORKERS processes, each module's tests on one of them (a module's
# shared fixture, such as a sweep, is made once); every test works in its own temporary
# folders and BLAS is pinned to 1 thread, so 2 workers keep 2 cores busy.
# --no-loadscope-reorder: modules go out in the order tests/conftest.py sorts them (the
# end-to-end ones first). `make test TEST_WORKERS=0` runs it in one process.
# --durations=10: the slowest ten tests close the output, so a suite that grows slow
# says where.
TEST_WORKERS ?= 2
PYTEST_XDIST := -m pytest -q -n $(TEST_WORKERS) --dist loadscope --no-loadscope-reorder
PYTEST_TEST := $(PYTEST_XDIST) --durations=10

test: $(STAMP) $(PLOTS_PAGE)
	$(PY) $(PYTEST_TEST)

test-fast: $(STAMP)
	$(PY) $(PYTEST_XDIST) -m 'not e2e and not slow and not proof'

test-sparkbc: $(STAMP)
	$(PY) -m pytest -q tests/bc

# A real browser (Debian's chromium, absent from CI's machine for `make test`, where the
# test skips) opens the page `dvc plots show` writes, with every host unresolvable, and
# counts the marks each panel drew.
test-browser: $(STAMP) $(PLOTS_PAGE)
	command -v chromium >/dev/null || { apt-get update -qq && apt-get install -y -qq chromium; }
	$(PY) -m pytest -q -n 0 -rs -m browser tests/pipeline/test_plots_page.py

# torch + transformers only here: `make test` never downloads them.
test-hf: $(STAMP)
	$(PY) -m pip install -q -c $(LOCK) -e '.[dev,hf]'
	$(PY) -m pytest -q tests/export tests/train/test_optim_muon.py tests/train/test_repeat_levers.py

# llama.cpp itself (llama-cpp-python compiles it with cmake and the C compiler: about 30
# minutes on 2 cores, once; pip keeps the wheel) reads the GGUF as Spark does.
LLAMA_CPP := llama-cpp-python==0.3.36
test-llama: $(STAMP)
	$(PY) -m pip install -q -c $(LOCK) $(LLAMA_CPP)
	$(PY) -m pytest -q -s -n 0 -m llama tests/export/test_export_llama_cpp.py

# torch only here: `make test` runs the same tests on array-api-strict and skips torch's.
# -rs prints why a GPU-only test was skipped (no CUDA/MPS device on this machine).
GPU_TESTS := tests/model/test_model_backend.py tests/model/test_model_generic.py \
             tests/model/test_model_device.py tests/train/test_loop_device.py
# On Linux the torch wheel pip picks is the CUDA build (about 3.2 GB of NVIDIA libraries;
# .venv reached 5.9 GB). Without an NVIDIA GPU, install the CPU build first and it is kept:
#   .venv/bin/pip install torch --index-url https://download.pytorch.org/whl/cpu
test-gpu: $(STAMP)
	@echo "make test-gpu: installing the gpu extra; unless torch is already installed, pip fetches the CUDA build on Linux (~3.2 GB of NVIDIA libraries, .venv grows to ~5.9 GB)"
	$(PY) -m pip install -q -c $(LOCK) -e '.[dev,gpu]'
	$(PY) -m pytest -q -rs $(GPU_TESTS)

# Each stage's code deps in dvc.yaml, from the import graph (a test fails when they drift).
deps: $(STAMP)
	$(PY) tools/stage_deps.py --write

clean:
	rm -rf out .pytest_cache .hypothesis

# dvc.yaml runs the stages as `python3 -m stages.X`: the venv comes first on PATH.
DVC := PATH="$(CURDIR)/$(BIN):$$PATH" $(BIN)/dvc

# DVC deletes a stage's outputs before the stage runs, following links: with out/, out/train
# or a job folder a link, the files at its target would go before the stage refuses the link
# (docs/outputs.md "What a job holds after ..."), so make run refuses first.
run: $(STAMP) $(PLOTS_PAGE)
	@! test -e out || test -z "$$(find out -maxdepth 2 -type l)" || { echo "make: $$(find out -maxdepth 2 -type l | head -1) is a link; DVC would delete the pipeline's outputs at its target before a stage refuses it: make it a real folder (docs/outputs.md)" >&2; exit 2; }
	@# DVC parses dvc.yaml before any stage runs: a params.yaml without its `job:` key
	@# would get "failed to parse 'stages.decode-bc.outs' ... Could not find 'job'";
	@# the check-params stage's own check says what is wrong with the file first
	@$(PY) -m stages.check_params
	$(DVC) repro
	@$(BIN)/spark status --summary

spark-sgd-proof: $(STAMP)
	$(PY) tools/proof.py tiny

spark-sgd-proof-scale: $(STAMP)
	$(PY) tools/proof.py scale

spark-coder-proof: $(STAMP)
	$(PY) tools/coder_proof.py

# the same job through the pipeline (dvc exp run -S ++key=value for every key of
# data/programs/coder-proof.yaml): the same weights bytes as spark-coder-proof
spark-coder-proof-dvc: $(STAMP)
	PATH=$(BIN):$$PATH && eval "$$($(PY) tools/coder_proof.py --dvc-command)"

sparkbc-e2e: $(STAMP)
	PATH="$(CURDIR)/$(BIN):$$PATH" $(PY) tools/sparkbc_e2e.py

repro-check: $(STAMP)
	PATH="$(CURDIR)/$(BIN):$$PATH" $(BIN)/spark repro-check

bench: $(STAMP)
	$(BIN)/spark bench --scale tiny
	$(BIN)/spark bench --scale large
	$(BIN)/spark bench --params data/programs/coder-proof.yaml

# Every measured figure of README.md, from real runs here, with the machine and date
# recorded in out/readme_figures.json. `tools/readme_figures.py --quick` checks the
# machinery in seconds and leaves README.md alone.
readme-figures: $(STAMP)
	PATH="$(CURDIR)/$(BIN):$$PATH" $(PY) tools/readme_figures.py

# Only the README blocks a run reproduces exactly (make run's summary, the sweep grids),
# a few minutes: rerun after anything that moves the default job's bytes.
readme-figures-stable: $(STAMP)
	PATH="$(CURDIR)/$(BIN):$$PATH" $(PY) tools/readme_figures.py --stable
