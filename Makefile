# One entry for every build, test, demo and bench of accord.
#   make test   - lint, then every test suite against a throwaway PostgreSQL and etcd cluster
#   make demo   - the polyglot demo (mk/demo.mk): five languages, one store, a summary
#   make bench  - benchmarks against raw SQL and the libraries users pick today (mk/bench.mk)
#   make help   - every target people use, one line each
#
# Each binding adds its own targets in mk/<binding>.mk and appends them to TEST_SUITES (run
# with the throwaway PostgreSQL and etcd cluster) and LINTS.
#
# `make help` documents itself: a rule line whose target is followed by `## text` is listed, with
# that text, under the name of its file (this Makefile first, then mk/*.mk in name order). Put
# the `##` on the rule line only, never after a variable assignment (the spaces before it would
# end up in the value).

CARGO ?= cargo
# The core's features where a release build selects it alone (the bench's contender): the ones
# the bindings and the CLI enable (their Cargo.toml), so that every worker reaches etcd.
CORE_FEATURES := --features etcd
# The Rust crates that `make test` builds in debug through cargo (every one but the Python and
# Node extensions, which maturin and napi build), selected together in every cargo command that
# builds any of them, so that each such command resolves the same features: cargo unifies
# features over the packages a command selects, and a command selecting one crate alone (the
# CLI's crossterm asks mio and rustix for more, cbindgen asks syn for more, and so on) would
# build tokio, tonic, etcd-client and the core once more, for that feature set. Selected so,
# the tests and every debug binary share one build of each (the core's tests build it in the
# test profile, the binaries in dev: the core itself twice, its dependencies once). The bench's
# own feature `etcd` turns on its scenario 14 (test-bench runs it on the test cluster). The core's
# feature `sqlx` (the fenced-write helpers on sqlx) is on for its tests and README example: it
# adds 66 crates, measured at +13 s of CPU over a clean build of the core's test targets (4m30s
# of user+sys without it, 4m43s with it; this 2-core machine under load, so the wall clock said
# less than the noise: 6m46s without, 5m05s with).
RUST_CRATES := -p accord-coord -p accord-coord-cli -p accord-c -p accord-bench \
  --features accord-coord/etcd,accord-coord/sqlx,accord-bench/etcd
WITH_PG := scripts/with-postgres.sh
# The Python venv (mk/python.mk makes it). Set here, before the fragments are included in name
# order, because mk/demo.mk and mk/polyglot.mk name a stamp in it as a prerequisite, and
# prerequisites are expanded as they are read.
PY_VENV := .venv

TEST_SUITES := test-rust
LINTS := lint-rust

.PHONY: all build test lint test-suites test-rust lint-rust fmt migrate-sql clean help develop

all: build ## the default: `make` alone is `make build`

-include $(sort $(wildcard mk/*.mk))

build: ## cargo build of every crate of the workspace (debug)
	$(CARGO) build --workspace

# The debug builds to work with: the Python package editable in .venv (mk/python.mk) and the Node
# addon in node/ (mk/node.mk). Much quicker to rebuild after a change in core/ than the release
# builds that `make test-python`, `make demo` and `npm pack` use.
develop: develop-python develop-node ## debug builds for a quick edit-run loop: develop-python + develop-node

# Lists the targets documented with `## ` (see the top of this file).
help: ## this list
	@awk 'BEGIN { print "make TARGET, one of these. (db): needs a PostgreSQL: scripts/with-postgres.sh make TARGET,"; \
	    print "or ACCORD_TEST_DATABASE_URL set to one; (etcd): an etcd cluster, scripts/with-etcd.sh make TARGET."; \
	    print "`make test` and `make bench` start their own.\n" } \
	  FNR == 1 { file = FILENAME } \
	  /^[A-Za-z0-9_.-]+:([^=]|$$).*## / { \
	    if (file != shown) { printf "%s%s:\n", (shown == "" ? "" : "\n"), file; shown = file } \
	    target = $$0; sub(/:.*/, "", target); text = $$0; sub(/^[^#]*## /, "", text); \
	    printf "  %-19s %s\n", target, text }' $(firstword $(MAKEFILE_LIST)) $(sort $(wildcard mk/*.mk))

# The test command of README.md, and what CI runs. Starts its own PostgreSQL (see
# scripts/with-postgres.sh) unless ACCORD_TEST_DATABASE_URL names one, and its own 3-member etcd
# cluster (scripts/with-etcd.sh, mk/etcd.mk) unless ACCORD_TEST_ETCD_URL names one, and stops
# both even when tests fail.
test: lint ## lint, then every test suite against a throwaway PostgreSQL and etcd cluster (what CI runs)
	$(WITH_PG) $(WITH_ETCD) $(MAKE) --no-print-directory test-suites

test-suites: $(TEST_SUITES) ## every test suite, without the lints (db, etcd)

# Every crate of RUST_CRATES at once (the core's tests, the CLI's, the C ABI crate's unit tests):
# one build serves them all, and the examples other suites build. With the core's feature `etcd`,
# so that the etcd store's tests (core/tests/etcd*.rs) run too. They mostly wait (member kills,
# elections, lease ttls), so they run beside the other test binaries rather than after them
# (scripts/rust-test-lanes.py; about 3 minutes less). In their lane: the CLI's tests, which use
# the etcd cluster whose members the etcd tests kill (so after those). Alone at the end: the two
# binaries that stop the shared PostgreSQL server, which no other test may see.
TEST_LANE_ETCD := etcd,etcd_cluster,etcd_secure,cli
TESTS_ALONE := server_restart,prometheus_restart
test-rust: ## the Rust crates' tests (core, CLI, C ABI) and doc tests, and README's quick start run twice on each server (db, etcd)
	CARGO="$(CARGO)" python3 scripts/rust-test-lanes.py --beside $(TEST_LANE_ETCD) --after $(TESTS_ALONE) -- $(RUST_CRATES)
	$(CARGO) test $(RUST_CRATES) --doc
	@# README's Rust quick start (core/examples/quickstart.rs), twice in a row: it must run again.
	$(CARGO) build $(RUST_CRATES) --example quickstart
	ACCORD_URL="$$ACCORD_TEST_DATABASE_URL" target/debug/examples/quickstart
	ACCORD_URL="$$ACCORD_TEST_DATABASE_URL" target/debug/examples/quickstart
	@# And twice on the etcd cluster (mk/etcd.mk).
	$(call on_etcd,target/debug/examples/quickstart)
	$(call on_etcd,target/debug/examples/quickstart)

lint: $(LINTS) ## every lint: rustfmt, clippy, ruff, mypy, tsc, gofmt (no database)

# The features `etcd` and `sqlx` on, so that the etcd store, the sqlx helpers and their tests
# are linted too.
lint-rust: ## cargo fmt --check and clippy -D warnings
	$(CARGO) fmt --all --check
	$(CARGO) clippy --workspace --all-targets --features accord-coord/etcd,accord-coord/sqlx,accord-bench/etcd -- -D warnings

fmt: ## cargo fmt of every crate
	$(CARGO) fmt --all

# The schema SQL for DBAs who apply migrations by hand (SCHEMA=accord by default).
SCHEMA ?= accord
migrate-sql: ## print the schema SQL for applying migrations by hand (SCHEMA=accord)
	@$(CARGO) run --quiet -p accord-coord --example migration_sql -- $(SCHEMA)

clean: ## cargo clean, and the module develop-python put in python/accord; .venv, node_modules stay
	$(CARGO) clean
	rm -f python/accord/_accord.*.so
