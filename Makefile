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

# uv resolves and installs the same pins as pip in about 20 s instead of about 150 s (measured on the 2-core CI machine);
# it does not read pip's configuration, so a local wheel directory pip is pointed at (PIP_FIND_LINKS: where the CPU
# torch wheel lies) is handed to it. Where uv cannot be had or fails, pip installs as before.
FIND_LINKS = $(if $(PIP_FIND_LINKS),--find-links $(PIP_FIND_LINKS))

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	( $(BIN)/python -m pip install -q uv && \
	  $(BIN)/python -m uv pip install -q --python $(BIN)/python $(FIND_LINKS) -e '.[test,baselines]' ) || \
	( $(BIN)/python -m pip install -q --upgrade pip && $(BIN)/python -m pip install -q -e '.[test,baselines]' )
	touch $@

# Demo inputs: a simulated MIMIC-Extract file and a Harrod-shaped EHR table, versioned as raw data with DVC.
$(DATA): | $(VENV)/.installed
	$(BIN)/privehr demo-data mimic --out $(DATA) --stays $(STAYS) --seed 0

$(EHR): | $(VENV)/.installed
	$(BIN)/privehr demo-data ehr --out $(EHR) --seed 0

# DVC stores files 0444 in folders made by the umask: the raw tables are patients' records, so the cache and the
# local remote are kept owner-only (tasks/versioning.py does the same after each run).
$(VENV)/.data-versioned: $(DATA) $(EHR)
	umask 077 && $(BIN)/dvc add data --quiet && $(BIN)/dvc push --quiet
	chmod -R go-rwx .dvc/cache .dvcstore
	touch $@

demo: install $(VENV)/.data-versioned
	$(BIN)/privehr run

# Two workers (pytest-xdist), each test file on one worker (its module fixtures run once), the slowest files first, one
# torch thread each (tests/conftest.py; --no-loadscope-reorder keeps that order: xdist would otherwise hand out the
# files with the most tests first, and the two-test Prefect UI file, among the slowest, ran last while the other worker
# sat idle). Three workers kept the cores busier (92 % against 88 %) but each process's CPU time grew: 965, 1,152 and
# 1,151 s in three CI runs against 963 s on two. JOBS=1 runs the suite in one process.
JOBS ?= 2

test: install
	$(BIN)/python -m pytest -q $(if $(filter-out 1,$(JOBS)),-n $(JOBS) --dist loadfile --no-loadscope-reorder)

bench: install
	$(BIN)/python bench/cohort_loader.py
