# The polyglot runs (tests/polyglot/), Rust, Python and Node workers on one PostgreSQL: the grant
# audit (they hammer one key; a trigger records every grant in commit order, and the fences must
# strictly increase: G2 across languages) and the pool run (they drain one work pool: P2).
#
#   make test-polyglot    against ACCORD_TEST_DATABASE_URL (scripts/with-postgres.sh make test-polyglot)

.PHONY: test-polyglot

TEST_SUITES += test-polyglot

test-polyglot: $(DEMO_PY_STAMP) build-node-debug ## the grant audit and the pool run: Rust, Python and Node workers (db)
	$(CARGO) build -p accord --example contend
	$(PY) tests/polyglot/run.py
	$(PY) tests/polyglot/pool.py

LINTS += lint-polyglot

lint-polyglot: python-venv ## ruff on tests/polyglot
	$(PY_VENV)/bin/ruff check tests/polyglot && $(PY_VENV)/bin/ruff format --check tests/polyglot
