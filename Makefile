# Two commands for a fresh machine:  `make demo`  and  `make test`.
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV   ?= .venv
BIN     = $(VENV)/bin
DATA    = data/mimic/all_hourly_data.h5
EHR     = data/ehr/EHR_dataset.csv
STAYS  ?= 4000
export PREFECT_SERVER_ANALYTICS_ENABLED ?= false

.PHONY: demo test install bench clean-runs

install: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[test,baselines]'
	touch $@

# Demo inputs: a simulated MIMIC-Extract file and a Harrod-shaped EHR table, versioned as raw data with DVC.
$(DATA): | $(VENV)/.installed
	$(BIN)/privehr demo-data mimic --out $(DATA) --stays $(STAYS) --seed 0

$(EHR): | $(VENV)/.installed
	$(BIN)/privehr demo-data ehr --out $(EHR) --seed 0

$(VENV)/.data-versioned: $(DATA) $(EHR)
	$(BIN)/dvc add data --quiet
	$(BIN)/dvc push --quiet
	touch $@

demo: install $(VENV)/.data-versioned
	$(BIN)/privehr run

test: install
	$(BIN)/python -m pytest -q

bench: install
	$(BIN)/python bench/cohort_loader.py
