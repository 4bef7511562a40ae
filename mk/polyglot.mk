# The polyglot runs (tests/polyglot/), Rust, Python and Node workers on one PostgreSQL: the grant
# audit (they hammer one key; a trigger records every grant in commit order, and the fences must
# strictly increase: G2 across languages), the pool run (they drain one work pool: P2; again on
# the etcd test cluster when ACCORD_TEST_ETCD_URL names one, as in `make test`), the
# fleet runs, the waiting run (fair waiting and elections: X2, X3, E1-E2), the stream run
# (publishers and subscribers in three languages, a consumer killed before its ack: D1, D3, D5),
# and the fenced run (writers in three languages insert through accord's trigger fenced_write,
# some SIGSTOPped past their ttl: every stale write refused, every accepted row the key's latest
# grant in commit order).
#
#   make test-polyglot    against ACCORD_TEST_DATABASE_URL (scripts/with-postgres.sh make test-polyglot),
#                         and the pool run on ACCORD_TEST_ETCD_URL too
#                         (scripts/with-postgres.sh scripts/with-etcd.sh make test-polyglot)

.PHONY: test-polyglot

TEST_SUITES += test-polyglot

test-polyglot: $(DEMO_PY_STAMP) build-node-debug ## the grant audit, the pool, fleet, waiting, stream and fenced runs: Rust, Python and Node workers (db)
	$(CARGO) build $(RUST_CRATES) --example contend
	$(PY) tests/polyglot/run.py
	$(PY) tests/polyglot/pool.py postgres
	$(call if_etcd,$(PY) tests/polyglot/pool.py etcd)
	$(PY) tests/polyglot/fleet.py
	$(PY) tests/polyglot/fleet_churn.py
	$(PY) tests/polyglot/waiting.py
	$(PY) tests/polyglot/streams.py
	$(PY) tests/polyglot/fenced.py

fleet-churn: $(DEMO_PY_STAMP) build-node-debug ## the fleet's property run for a minute: random joins, leaves, kills (db)
	$(CARGO) build $(RUST_CRATES) --example contend
	ACCORD_CHURN_SECONDS=60 $(PY) tests/polyglot/fleet_churn.py

LINTS += lint-polyglot

lint-polyglot: python-venv ## ruff on tests/polyglot
	$(PY_VENV)/bin/ruff check tests/polyglot && $(PY_VENV)/bin/ruff format --check tests/polyglot
