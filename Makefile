# Two entry points for people: `make demo` and `make test`. Each installs what it needs.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# checkov pins libraries that clash with ours, so it lives in a venv of its own.
TOOLS := .venv-tools
# The mutation tool (cosmic-ray) too: it only makes the mutants; the project's venv judges them.
MUTANTS := .venv-mutants
# The ML frameworks the kit's integrations are tested with (tests/frameworks/): a venv of their own,
# CPU only (torch pinned to the CPU build on disk), with the kit installed editable.
FRAMEWORKS := .venv-frameworks
FRAMEWORKS_STAMP := $(FRAMEWORKS)/.installed
# Provider schemas (google, google-beta) extracted from the pinned CDKTF bindings; see tools/provider_schemas.py.
SCHEMAS := $(TOOLS)/provider-schemas/.installed

# pytest-xdist workers for `make test`: the suite mostly waits on stacks and subprocesses, so
# more workers than cores pay (tests/conftest.py keeps modules with a fixture of their own whole).
# Six were tried (2026-12-02): the run_last test then waited for workers that had nothing left
# to run and were never shut down, until its 1,200 s limit.
TEST_WORKERS ?= 4

.PHONY: demo up test bench sim mutants install clean prereqs $(FRAMEWORKS)

# Tested versions = deployed versions: requirements.txt is the deploy lock. python-hcl2 builds its
# parser tables at first use (seconds of CPU) and keeps them beside itself: built once here, not by
# every test process that first reads the Terraform.
$(STAMP): pyproject.toml requirements.txt
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -c requirements.txt -e '.[dev]'
	$(BIN)/python -c 'import hcl2.parser; hcl2.parser.parser()'
	touch $(STAMP)

$(TOOLS)/.installed:
	$(PYTHON) -m venv $(TOOLS)
	$(TOOLS)/bin/pip install --quiet 'checkov==3.3.30'
	touch $(TOOLS)/.installed

$(MUTANTS)/.installed: tools/mutants-requirements.txt
	$(PYTHON) -m venv $(MUTANTS)
	$(MUTANTS)/bin/pip install --quiet -r tools/mutants-requirements.txt
	touch $(MUTANTS)/.installed

$(SCHEMAS): tools/provider_schemas.py | $(STAMP)
	$(BIN)/python tools/provider_schemas.py fetch
	touch $(SCHEMAS)

$(FRAMEWORKS_STAMP): tests/frameworks/requirements.txt kit/pyproject.toml
	$(PYTHON) -m venv $(FRAMEWORKS)
	$(FRAMEWORKS)/bin/pip install --quiet --upgrade pip
	$(FRAMEWORKS)/bin/pip install --quiet -r tests/frameworks/requirements.txt
	$(FRAMEWORKS)/bin/pip install --quiet --no-deps -e kit
	touch $(FRAMEWORKS_STAMP)

$(FRAMEWORKS): $(FRAMEWORKS_STAMP)

install: $(STAMP)

# Python version, gcloud with its Pub/Sub emulator, Java: checked first, one message if missing.
prereqs:
	@$(PYTHON) tools/check_prereqs.py

demo: prereqs $(STAMP)
	$(BIN)/spotjobs demo

up: prereqs $(STAMP)
	$(BIN)/spotjobs local up

# The test run writes bytecode caches even where the environment says not to: otherwise every
# worker rewrites every test module's asserts and every stack process compiles the project again.
# The 25 slowest tests are printed at the end: the suite has a time budget (about 12 minutes).
test: prereqs $(STAMP) $(TOOLS)/.installed $(SCHEMAS) $(FRAMEWORKS_STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	PYTHONDONTWRITEBYTECODE= $(BIN)/python -m pytest -q -n $(TEST_WORKERS) --durations=25

bench: $(STAMP)
	$(BIN)/python -m bench

# The deterministic simulator (sim/): SIM_SEEDS seeds, one line per failing seed and a summary, in
# SIM_JOBS processes (one per core by default). 3000 seeds take about an hour of CPU when they pass
# (0.5-2 s each since handlers interleave at every call); a seed whose line stalls runs its quiet
# phase to the step bound and takes a minute or two.
SIM_SEEDS ?= 3000
SIM_JOBS ?= $(shell nproc 2>/dev/null || echo 1)
sim: $(STAMP)
	$(BIN)/python -m sim --seeds $(SIM_SEEDS) --jobs $(SIM_JOBS)

# Mutation testing of the decision rooms (docs/simulator.md, "Mutation testing"): a benchmark, not
# part of `make test`. ROOM=shared/pacing.py runs one room; results in bench/results/mutants-*.json.
# AGAIN=1, after adding tests, judges again only the mutants the room's last results left alive.
# Niced: one process, but for a long time (minutes per room), on a machine others share.
ROOM ?=
AGAIN ?=
mutants: $(STAMP) $(MUTANTS)/.installed
	nice -n 15 $(BIN)/python tools/mutants.py $(if $(ROOM),--room $(ROOM)) $(if $(AGAIN),--again)

clean:
	rm -rf $(VENV) $(TOOLS) $(MUTANTS) $(FRAMEWORKS) .pytest_cache .hypothesis
