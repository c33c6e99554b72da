# Countersign — developer commands. GNU make; recipes run in bash.
#
#   make run     embedded mode (SQLite + filesystem broker): web, worker, demo upstream
#   make test    the test suite, two shards at once (needs PostgreSQL and Redis; see .ci/services)
#   make chaos   the full chaos run (300 plans); figures to docs/reliability.md
#   make soak    2 web servers and 2 workers executing 1,000 plans exactly once
#   make bench   benchmarks (PostgreSQL + Redis); docs/benchmarks.md and docs/benchmarks/*.png
#   make lint    ruff check + ruff format --check + the import contracts (lint-imports) +
#                no circle of imports between files (config/release/check_cycles.py) +
#                the migrations since the previous release keep it running (CHANGELOG.md)
#   make fmt     apply ruff fixes and formatting
#   make lock    regenerate requirements.lock from pyproject.toml
#   make venv    create/sync .venv from requirements.lock
#   make clean   remove var/ and caches (keeps .venv)
#   make messages     refresh the pt_BR catalog under config/locale/ and compile it (.po and .mo
#                     are both committed; translate new entries before committing)
#   make screenshots  the queue and a plan page, desktop and phone, in docs/screenshots/ (Chromium)

SHELL := bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := help
MAKEFLAGS += --no-builtin-rules

VENV   := .venv
PY     := $(VENV)/bin/python
UV     := $(VENV)/bin/uv
RUFF   := $(VENV)/bin/ruff
STAMP  := $(VENV)/.synced
LOCK   := requirements.lock

# make run (START_TIMEOUT: seconds each process may take to listen on its port)
PORT          ?= 8000
DEMO_PORT     ?= 8765
START_TIMEOUT ?= 120

# make test (each may be overridden from the environment or the command line)
DATABASE_URL      ?= postgres://postgres@127.0.0.1:5432/countersign
REDIS_URL         ?= redis://127.0.0.1:6379/0
CELERY_BROKER_URL ?= $(REDIS_URL)
PYTEST_ARGS       ?=

# make bench (e.g. BENCH_ARGS=--quick; BENCH_HISTORY=100000 for a smaller B4 history)
BENCH_ARGS      ?=
BENCH_REDIS_URL ?= redis://127.0.0.1:6379/12

# make lock (e.g. LOCK_ARGS=--upgrade, or LOCK_ARGS="--upgrade-package django")
LOCK_ARGS ?=

.PHONY: help venv run test chaos soak bench lint fmt lock clean messages screenshots

help:
	@sed -n 's/^#   //p' Makefile

# --- virtualenv ------------------------------------------------------------------------
venv: $(STAMP)

# Created only if missing, with the first Python >= 3.12 that .ci/find-python finds.
$(PY):
	@python=$$(.ci/find-python); \
	echo "Creating $(VENV) with $$python"; \
	"$$python" -m venv --clear $(VENV)

# uv itself is pinned in the lock (dev extra), so install that same version: `uv pip sync`
# then leaves it alone.
$(UV): | $(PY)
	@version=$$(sed -n 's/^uv==\([^ ;\\]*\).*/\1/p' $(LOCK)); \
	$(PY) -m pip --version >/dev/null 2>&1 || $(PY) -m ensurepip --upgrade >/dev/null; \
	echo "Installing uv$${version:+==$$version} into $(VENV)"; \
	$(PY) -m pip install --quiet --disable-pip-version-check "uv$${version:+==$$version}"

# Re-sync whenever the lock is newer than the last sync. The packages are compiled to
# bytecode here, once: where PYTHONDONTWRITEBYTECODE is set, every process would otherwise
# compile what it imports again (the suite starts dozens of web servers and workers).
$(STAMP): $(LOCK) | $(UV)
	$(UV) pip sync --compile-bytecode --python $(PY) $(LOCK)
	@touch $@

# --- run ---------------------------------------------------------------------------
# Embedded mode; DATABASE_URL / CELERY_BROKER_URL are deliberately not set here (the
# settings default to SQLite under var/ and the filesystem:// broker).
run: venv
	PYTHON=$(PY) PORT=$(PORT) DEMO_PORT=$(DEMO_PORT) START_TIMEOUT=$(START_TIMEOUT) \
	COUNTERSIGN_ENV=embedded .ci/run-embedded

# --- test --------------------------------------------------------------------------
# Does not start services (CI runs .ci/services first); says clearly if they are down.
# The project's own modules are compiled to bytecode first, as make venv does for the
# packages: the suite starts dozens of processes that import them (errors are pytest's
# to report).
COMPILE := $(PY) -m compileall -q -j 0 actions approvals clients config demo executors

test: venv
	@DATABASE_URL='$(DATABASE_URL)' REDIS_URL='$(REDIS_URL)' PYTHON=$(PY) .ci/check-services
	@$(COMPILE) >/dev/null || true
ifeq ($(strip $(PYTEST_ARGS)),)
	@# The whole suite: two shards at once (.ci/test-shards), REDIS_URL's database and the next.
	DATABASE_URL='$(DATABASE_URL)' REDIS_URL='$(REDIS_URL)' COUNTERSIGN_ENV=test \
	PYTHON=$(PY) .ci/test-shards
else
	DATABASE_URL='$(DATABASE_URL)' REDIS_URL='$(REDIS_URL)' \
	CELERY_BROKER_URL='$(CELERY_BROKER_URL)' COUNTERSIGN_ENV=test \
	$(PY) -m pytest $(PYTEST_ARGS)
endif

# --- chaos and soak ------------------------------------------------------------------
# The full versions of two tests the suite runs small (services as for `make test`):
# chaos, 300 approved plans while workers are SIGKILLed and a private Redis restarts
# (tests/e2e/chaos.py; figures to docs/reliability.md; CHAOS_SEED=<n> replays a run);
# soak, 2 web servers and 2 workers executing 1,000 plans exactly once.
CHAOS_SEED ?=
chaos: venv
	@mkdir -p var
	@DATABASE_URL='$(DATABASE_URL)' REDIS_URL='$(REDIS_URL)' PYTHON=$(PY) .ci/check-services
	@$(COMPILE) >/dev/null || true
	DATABASE_URL='$(DATABASE_URL)' REDIS_URL='$(REDIS_URL)' \
	CELERY_BROKER_URL='$(CELERY_BROKER_URL)' COUNTERSIGN_ENV=test \
	CHAOS_PLANS=300 CHAOS_SEED='$(CHAOS_SEED)' CHAOS_FIGURES=var/chaos-figures.json \
	$(PY) -m pytest -q tests/e2e/test_chaos.py
	$(PY) bench/reliability.py var/chaos-figures.json docs/reliability.md

soak: venv
	@DATABASE_URL='$(DATABASE_URL)' REDIS_URL='$(REDIS_URL)' PYTHON=$(PY) .ci/check-services
	@$(COMPILE) >/dev/null || true
	DATABASE_URL='$(DATABASE_URL)' REDIS_URL='$(REDIS_URL)' \
	CELERY_BROKER_URL='$(CELERY_BROKER_URL)' COUNTERSIGN_ENV=test COUNTERSIGN_MP_PLANS=1000 \
	$(PY) -m pytest -q tests/e2e/test_multiprocess.py

# --- translations ------------------------------------------------------------------
# tests/approvals/test_i18n.py runs makemessages with these same arguments.
MESSAGES_ARGS := -l pt_BR --no-obsolete --ignore='tests/*' --ignore='bench/*' \
	--ignore='docs/*' --ignore='var/*'

messages: venv
	$(PY) manage.py makemessages $(MESSAGES_ARGS)
	$(PY) manage.py compilemessages -l pt_BR --ignore='.venv'

# --- bench ---------------------------------------------------------------------------
# Web (python -m config.web --workers), Celery workers, the demo upstream and a load
# generator, each a process of its own; a scratch database next to DATABASE_URL is
# created and dropped.
# See bench/run.py; the report alone: $(PY) bench/report.py
bench: venv
	@DATABASE_URL='$(DATABASE_URL)' REDIS_URL='$(BENCH_REDIS_URL)' PYTHON=$(PY) .ci/check-services
	DATABASE_URL='$(DATABASE_URL)' BENCH_REDIS_URL='$(BENCH_REDIS_URL)' COUNTERSIGN_ENV=test \
	$(PY) bench/run.py $(BENCH_ARGS)

# --- screenshots -------------------------------------------------------------------
# Embedded mode in a scratch directory (no PostgreSQL or Redis needed); see the script.
screenshots: venv
	$(PY) bench/screenshots.py --out docs/screenshots

# --- code style --------------------------------------------------------------------
lint: venv
	$(RUFF) check .
	$(RUFF) format --check .
	$(VENV)/bin/lint-imports
	$(PY) -m config.release.check_cycles
	$(PY) -m config.release.check_migrations

fmt: venv
	$(RUFF) check --fix .
	$(RUFF) format .

# --- dependencies ------------------------------------------------------------------
# Universal for Python >= 3.12 on any platform (markers), with hashes.
lock: | $(UV)
	$(UV) pip compile pyproject.toml --extra dev --python-version 3.12 --universal \
		--generate-hashes $(LOCK_ARGS) -o $(LOCK)

# --- housekeeping ------------------------------------------------------------------
clean:
	rm -rf var .pytest_cache .ruff_cache .hypothesis test-results
	find . -path ./$(VENV) -prune -o -type d -name __pycache__ -prune -exec rm -rf {} +
