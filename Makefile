# Targets a newcomer can guess. Everything runs from the project's own venv.
VENV ?= .venv
PY := $(VENV)/bin/python

.PHONY: install up test lint typecheck check bench-admission clean

$(PY):
	python3 -m venv $(VENV)
	$(VENV)/bin/pip install -q -e '.[test]'

install: $(PY)

up: install            ## start Berth on this machine (Ctrl-C stops it)
	$(VENV)/bin/berth up

test: install          ## the whole suite, as CI runs it
	$(PY) -m pytest -q

lint: install
	$(PY) -m ruff check .

typecheck: install
	$(PY) -m mypy

check: lint typecheck test

bench-admission: install   ## decisions/s and bytes per pending workload of the admission core
	$(PY) bench/admission_core.py

clean:
	rm -rf .pytest_cache .mypy_cache .ruff_cache .hypothesis build *.egg-info
