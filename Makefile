# One entry for every build, test, demo and bench of accord.
#   make test   - lint, then every test suite against a throwaway PostgreSQL
#   make demo   - the polyglot demo (mk/demo.mk): five languages, one store, a summary
#   make bench  - benchmarks against raw SQL and the libraries users pick today (mk/bench.mk)
#
# Each binding adds its own targets in mk/<binding>.mk and appends them to TEST_SUITES (run
# with the throwaway PostgreSQL) and LINTS.

CARGO ?= cargo
WITH_PG := scripts/with-postgres.sh
# The Python venv (mk/python.mk makes it). Set here, before the fragments are included in name
# order, because mk/demo.mk and mk/polyglot.mk name a stamp in it as a prerequisite, and
# prerequisites are expanded as they are read.
PY_VENV := .venv

TEST_SUITES := test-rust
LINTS := lint-rust

.PHONY: all build test lint test-suites test-rust lint-rust fmt migrate-sql clean

all: build

-include $(sort $(wildcard mk/*.mk))

build:
	$(CARGO) build --workspace

# The test command of README.md, and what CI runs. Starts its own PostgreSQL (see
# scripts/with-postgres.sh) unless ACCORD_TEST_DATABASE_URL names one, and stops it even when
# tests fail.
test: lint
	$(WITH_PG) $(MAKE) --no-print-directory test-suites

test-suites: $(TEST_SUITES)

test-rust:
	$(CARGO) test -p accord --all-targets
	$(CARGO) test -p accord --doc

lint: $(LINTS)

lint-rust:
	$(CARGO) fmt --all --check
	$(CARGO) clippy --workspace --all-targets -- -D warnings

fmt:
	$(CARGO) fmt --all

# The schema SQL for DBAs who apply migrations by hand (SCHEMA=accord by default).
SCHEMA ?= accord
migrate-sql:
	@$(CARGO) run --quiet -p accord --example migration_sql -- $(SCHEMA)

clean:
	$(CARGO) clean
