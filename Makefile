# The two commands: `make demo` runs the platform on its embedded defaults, `make test` passes the
# tests. Both create the virtualenv when missing and are safe to run again.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test lint typecheck check-migrations unit lock clean

# Everything pinned with hashes by requirements.lock (runtime, tests, lint), then the platform,
# gpuctl and the node agent as editable installs of this checkout.
$(STAMP): requirements.lock pyproject.toml gpuctl/pyproject.toml gpuagent/pyproject.toml
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/pip install --quiet --disable-pip-version-check --require-hashes -r requirements.lock
	$(BIN)/pip install --quiet --disable-pip-version-check --no-deps -e . -e ./gpuctl -e ./gpuagent
	touch $(STAMP)

# Rewrites requirements.lock and docker/requirements.txt from the pyproject files (scripts/lock).
lock: $(STAMP)
	scripts/lock

demo: $(STAMP)
	mkdir -p var
	$(BIN)/python manage.py migrate --noinput
	$(BIN)/python manage.py seed_demo
	SCHEDULER_IN_PROCESS_LOOP=1 DEMO_WORKLOAD=1 $(BIN)/python manage.py runserver --noreload 127.0.0.1:8000

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/lint-imports --no-cache
	PATH="$(CURDIR)/$(BIN):$$PATH" scripts/check-docker

# Static types, strict ([tool.mypy] in pyproject.toml says which packages and why).
typecheck: $(STAMP)
	$(BIN)/mypy

check-migrations: $(STAMP)
	$(BIN)/python manage.py makemigrations --check --dry-run

# The tests run in two pytest-xdist workers: most long tests wait (a real Slurm, a browser, a
# Celery worker, pip) rather than compute, so a second worker overlaps that waiting with the
# CPU-bound tests. Tests that share a real resource (the Slurm clusters, the browser tests'
# server) run in one worker: tests/conftest.py schedules them. PYTEST_WORKERS=0: one process.
PYTEST_WORKERS ?= 2

test: lint typecheck check-migrations
	$(BIN)/python -m pytest -n $(PYTEST_WORKERS)
	# The double-allocation constraint must hold on both engines: when the suite ran on another
	# database, run the engine tests once more on the embedded SQLite.
	if [ -n "$$DATABASE_URL" ]; then \
	  env -u DATABASE_URL $(BIN)/python -m pytest -q -m engines tests/integration; fi

unit: $(STAMP)
	$(BIN)/python -m pytest tests/unit -q

clean:
	rm -rf $(VENV) var staticfiles build dist gpuctl/build gpuagent/build
