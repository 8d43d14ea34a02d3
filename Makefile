# Quick start: `make lab` (set up + open the notebooks), `make test` (set up + run every test).
VENV := .venv
PY := $(VENV)/bin/python
PYTEST_FLAGS ?=

.PHONY: lab test setup-lab setup-test bench notebooks clean

# Loopback only; as root (containers, workshop VMs) Jupyter needs --allow-root.
LAB_FLAGS ?= --ServerApp.ip=127.0.0.1 $(if $(filter 0,$(shell id -u)),--allow-root,)

lab: setup-lab
	$(VENV)/bin/jupyter lab $(LAB_FLAGS) notebooks/

test: setup-test
	$(PY) -m pytest -p no:cacheprovider $(PYTEST_FLAGS) tests
	$(PY) -m pytest -p no:cacheprovider --nbval --nbval-current-env --nbval-sanitize-with notebooks/sanitize.cfg notebooks

setup-lab:
	scripts/setup.sh lab

setup-test:
	scripts/setup.sh test

bench: setup-test
	$(PY) -m explainer bench

# Re-execute every notebook in place (seeded), so stored outputs match the library.
notebooks: setup-test
	$(PY) scripts/execute_notebooks.py notebooks/*.ipynb

clean:
	rm -rf $(VENV) build *.egg-info test-artifacts
