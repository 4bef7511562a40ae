# The Python bench program (bench/python/bench.py; the contract is bench/README.md): accord's
# sync and async clients against tooz and PALs, the uncontended try-acquire + release loop.
#
#   make bench-python         against the PostgreSQL named by ACCORD_TEST_DATABASE_URL, e.g.
#                             scripts/with-postgres.sh make bench-python
#                             → $(BENCH_OUT_DIR)/python.json (ACCORD_BENCH_PAIRS=2000 for a
#                             quick run; ACCORD_BENCH_WARMUP too)
#   make bench-python-venv    just the bench venv (.venv-bench), which bench/report.py uses too
#
# The bench venv is apart from .venv (the package's dev tools): it holds the peers pinned in
# bench/python/requirements.txt (wheels only), matplotlib, and accord's release wheel.

BENCH_OUT_DIR ?= target/bench
BENCH_VENV := .venv-bench
BENCH_PY := $(BENCH_VENV)/bin/python
BENCH_PY_REQUIREMENTS := bench/python/requirements.txt
BENCH_PY_STAMP := $(BENCH_VENV)/.accord-bench-requirements

.PHONY: bench-python bench-python-venv

# The venv and the requirements, once (again when requirements.txt changes).
$(BENCH_PY_STAMP): $(BENCH_PY_REQUIREMENTS)
	@test -x $(BENCH_PY) || $(PYTHON) -m venv $(BENCH_VENV)
	$(BENCH_PY) -m pip install --quiet --disable-pip-version-check --only-binary=:all: \
	  -r $(BENCH_PY_REQUIREMENTS)
	@touch $@

bench-python-venv: $(BENCH_PY_STAMP) ## the bench venv .venv-bench: the Python peers, matplotlib

bench-python: bench-python-venv wheel-python ## the Python bench program, release wheel → target/bench/python.json (db)
	@test -n "$$ACCORD_TEST_DATABASE_URL" || { \
	  echo "bench-python: no database; run it as scripts/with-postgres.sh make bench-python" >&2; \
	  exit 1; }
	$(BENCH_PY) -m pip install --quiet --disable-pip-version-check --no-deps --force-reinstall \
	  $$(ls -t $(PY_WHEELS)/accord_coord-*.whl | head -n 1)
	mkdir -p $(BENCH_OUT_DIR)
	ACCORD_BENCH_URL="$${ACCORD_BENCH_URL:-$$ACCORD_TEST_DATABASE_URL}" ACCORD_BENCH_OUT=$(BENCH_OUT_DIR)/python.json \
	  ACCORD_BENCH_STATEMENTS=$(BENCH_OUT_DIR)/statements.json \
	  $(BENCH_PY) bench/python/bench.py
