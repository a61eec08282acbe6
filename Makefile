# The two commands: `make demo` runs the platform on its embedded defaults, `make test` passes the
# tests. Both create the virtualenv when missing and are safe to run again.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test lint check-migrations unit clean

$(STAMP): requirements.lock pyproject.toml
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/pip install --quiet --disable-pip-version-check -r requirements.lock
	$(BIN)/pip install --quiet --disable-pip-version-check --no-deps -e .
	touch $(STAMP)

demo: $(STAMP)
	mkdir -p var
	$(BIN)/python manage.py migrate --noinput
	$(BIN)/python manage.py seed_demo
	SCHEDULER_IN_PROCESS_LOOP=1 DEMO_WORKLOAD=1 $(BIN)/python manage.py runserver --noreload 127.0.0.1:8000

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	PATH="$(CURDIR)/$(BIN):$$PATH" scripts/check-docker

check-migrations: $(STAMP)
	$(BIN)/python manage.py makemigrations --check --dry-run

test: lint check-migrations
	$(BIN)/python -m pytest
	# The double-allocation constraint must hold on both engines: when the suite ran on another
	# database, run the engine tests once more on the embedded SQLite.
	if [ -n "$$DATABASE_URL" ]; then \
	  env -u DATABASE_URL $(BIN)/python -m pytest -q -m engines tests/integration; fi

unit: $(STAMP)
	$(BIN)/python -m pytest tests/unit -q

clean:
	rm -rf $(VENV) var staticfiles
