# `make bench`: accord against raw SQL and the libraries users pick today (bench/README.md).
#
#   make bench          a throwaway PostgreSQL, every contender built in release mode, each
#                       language's bench program in turn, then bench/report.py: the table on
#                       stdout, docs/benchmarks.md and docs/benchmarks.png
#   make bench-rust     scenarios 1-5, 8, 10-13, 15 only (needs ACCORD_TEST_DATABASE_URL, e.g. through
#                       scripts/with-postgres.sh); bench-c, bench-go, bench-python and
#                       bench-node are in their own fragments
#   make bench-fleet    scenario 9 (fleets: members as processes, killed for real)
#   make bench-report   the report from whatever target/bench holds
#   make bench-etcd     scenario 14 alone: accord on etcd against etcd's Go concurrency.Mutex
#                       and beside accord on a durable PostgreSQL (own PostgreSQL and etcd
#                       cluster, data on disk); bench-etcd-report rewrites only those rows of
#                       docs/benchmarks.md
#   make bench-fenced   scenario 15 alone (fenced writes: the check against the UPDATE without
#                       it, fsync off and on; done_in against a write then done), own
#                       PostgreSQL; rewrites only those rows of docs/benchmarks.md
#
# Every program gets the same URL, without TLS (loopback: what the comparison is about is
# the client, and node-postgres and libpq disagree about what sslmode=prefer means); the Rust
# program adds accord and raw SQL over TLS (the test cluster's CA) as rows of their own.

BENCH_OUT_DIR ?= target/bench
BENCH_DOC := docs/benchmarks.md
BENCH_PLOT := docs/benchmarks.png

.PHONY: bench bench-all bench-build bench-rust bench-fleet bench-report bench-etcd bench-etcd-run \
  bench-etcd-build bench-etcd-report bench-fenced bench-fenced-run

bench: ## the whole benchmark (own PostgreSQL): docs/benchmarks.md and .png
	$(WITH_PG) $(MAKE) --no-print-directory bench-all

# Everything is built before anything is measured, so that no compiler competes with a run.
bench-build: build-bench-c build-bench-go build-node $(BENCH_NODE_STAMP) bench-python-venv wheel-python \
  bench-etcd-build
	$(CARGO) build --release -p accord-bench
	$(CARGO) build --release -p accord-coord $(CORE_FEATURES) --example contend

bench-all: bench-build
	rm -rf $(BENCH_OUT_DIR) && mkdir -p $(BENCH_OUT_DIR)
	u="$$ACCORD_TEST_DATABASE_URL"; case "$$u" in *\?*) u="$$u&sslmode=disable";; *) u="$$u?sslmode=disable";; esac; \
	  export ACCORD_BENCH_URL="$$u"; \
	  $(MAKE) --no-print-directory bench-rust bench-fleet bench-c bench-go bench-python bench-node
	ETCD_DATA_BASE=$${TMPDIR:-/tmp} $(WITH_ETCD) $(MAKE) --no-print-directory bench-etcd-run
	$(MAKE) --no-print-directory bench-report

bench-rust: ## the Rust bench program alone, scenarios 1-5, 8, 10-13, 15 → target/bench/rust.json (db)
	@mkdir -p $(BENCH_OUT_DIR)
	$(CARGO) build --release -p accord-bench
	ACCORD_BENCH_URL="$${ACCORD_BENCH_URL:-$$ACCORD_TEST_DATABASE_URL}" ACCORD_BENCH_OUT=$(BENCH_OUT_DIR)/rust.json \
	  ACCORD_BENCH_TLS_ROOT_CERT="$$ACCORD_TEST_SSL_ROOT_CERT" target/release/accord-bench

bench-fleet: python-venv ## scenario 9, fleets: members as processes → target/bench/fleet.json (db)
	@mkdir -p $(BENCH_OUT_DIR)
	$(CARGO) build --release -p accord-coord $(CORE_FEATURES) --example contend
	ACCORD_CONTEND=target/release/examples/contend $(PY) bench/fleet_bench.py $(BENCH_OUT_DIR)/fleet.json

bench-report: bench-python-venv ## the report from whatever target/bench holds
	$(BENCH_PY) bench/report.py $(BENCH_OUT_DIR) $(BENCH_DOC) $(BENCH_PLOT)

# Scenario 14: the Rust program with the feature `etcd`, and etcd's own Go lock (bench/etcd-go,
# go.etcd.io/etcd/client/v3 from the module cache: tests/etcd-server pins the same release).
BENCH_ETCD_GO := target/bench/etcd-go

bench-etcd-build:
	$(CARGO) build --release -p accord-bench --features etcd
	mkdir -p $(dir $(BENCH_ETCD_GO))
	cd bench/etcd-go && GOTOOLCHAIN=local go vet . && GOTOOLCHAIN=local go build -o ../../$(BENCH_ETCD_GO) .

bench-etcd: bench-etcd-build ## scenario 14 alone: accord on etcd vs concurrency.Mutex and a durable PostgreSQL, then only its rows of docs/benchmarks.md
	@mkdir -p $(BENCH_OUT_DIR)
	ETCD_DATA_BASE=$${TMPDIR:-/tmp} $(WITH_PG) $(WITH_ETCD) $(MAKE) --no-print-directory bench-etcd-run
	$(MAKE) --no-print-directory bench-etcd-report

# Needs ACCORD_TEST_DATABASE_URL (or ACCORD_BENCH_URL) and ACCORD_TEST_ETCD_URL; without TLS to
# PostgreSQL (as every contender of `make bench`; etcd's URL has none). Rust first, then Go.
bench-etcd-run:
	@mkdir -p $(BENCH_OUT_DIR)
	u="$${ACCORD_BENCH_URL:-$$ACCORD_TEST_DATABASE_URL}"; case "$$u" in *sslmode=*) ;; *\?*) u="$$u&sslmode=disable";; *) u="$$u?sslmode=disable";; esac; \
	  ACCORD_BENCH_URL="$$u" ACCORD_BENCH_ETCD_URL="$$ACCORD_TEST_ETCD_URL" \
	  ACCORD_BENCH_OUT=$(BENCH_OUT_DIR)/rust-etcd.json target/release/accord-bench --scenarios 14
	ACCORD_BENCH_ETCD_URL="$$ACCORD_TEST_ETCD_URL" ACCORD_BENCH_OUT=$(BENCH_OUT_DIR)/go-etcd.json $(BENCH_ETCD_GO)

bench-etcd-report: bench-python-venv ## rewrite only scenario 14's rows of docs/benchmarks.md from target/bench
	$(BENCH_PY) bench/report.py $(BENCH_OUT_DIR) $(BENCH_DOC) - --only etcd

# Scenario 15 alone, as bench-etcd does for 14: its own throwaway PostgreSQL (the bench turns
# fsync on for the second pass), then only its rows of docs/benchmarks.md.
bench-fenced: bench-python-venv ## scenario 15 alone (fenced writes, fsync off and on), then only its rows of docs/benchmarks.md
	@mkdir -p $(BENCH_OUT_DIR)
	$(CARGO) build --release -p accord-bench
	$(WITH_PG) $(MAKE) --no-print-directory bench-fenced-run
	$(BENCH_PY) bench/report.py $(BENCH_OUT_DIR) $(BENCH_DOC) - --only fenced

bench-fenced-run:
	u="$${ACCORD_BENCH_URL:-$$ACCORD_TEST_DATABASE_URL}"; case "$$u" in *sslmode=*) ;; *\?*) u="$$u&sslmode=disable";; *) u="$$u?sslmode=disable";; esac; \
	  ACCORD_BENCH_URL="$$u" ACCORD_BENCH_OUT=$(BENCH_OUT_DIR)/rust-fenced.json \
	  target/release/accord-bench --scenarios 15

# `make test` runs the Rust bench program and the report at a tiny size, so that neither rots
# between benchmark runs: every scenario must run and yield its figures (the bench program fails
# on a held key, a lost lease or a missed message). No figure is judged here: timing belongs in
# the benchmark.
.PHONY: test-bench lint-bench
TEST_SUITES += test-bench
LINTS += lint-bench

test-bench: python-venv ## the Rust bench and the report at a tiny size, so they do not rot (db, etcd)
	$(CARGO) build $(RUST_CRATES) --bin accord-bench
	rm -rf target/bench-smoke && mkdir -p target/bench-smoke
	ACCORD_BENCH_URL="$$ACCORD_TEST_DATABASE_URL" ACCORD_BENCH_OUT=target/bench-smoke/rust.json \
	  ACCORD_BENCH_TLS_ROOT_CERT="$$ACCORD_TEST_SSL_ROOT_CERT" target/debug/accord-bench --pairs 40 --warmup 4 --keepalive-seconds 3 --keepalive-leases 300 \
	  --pool-keys 120 --pool-workers 3 --million-keys 2000
	ACCORD_BENCH_URL="$$ACCORD_TEST_DATABASE_URL" ACCORD_BENCH_ETCD_URL="$$ACCORD_TEST_ETCD_URL" \
	  ACCORD_BENCH_OUT=target/bench-smoke/rust-etcd.json target/debug/accord-bench --scenarios 14 \
	  --pairs 40 --warmup 4 --keepalive-seconds 3 --etcd-keepalive-leases 300
	cd bench/etcd-go && GOTOOLCHAIN=local go build -o ../../target/bench-smoke/etcd-go .
	ACCORD_BENCH_ETCD_URL="$$ACCORD_TEST_ETCD_URL" ACCORD_BENCH_OUT=target/bench-smoke/go-etcd.json \
	  ACCORD_BENCH_PAIRS=40 ACCORD_BENCH_WARMUP=4 target/bench-smoke/etcd-go
	$(CARGO) build $(RUST_CRATES) --example contend
	$(PY) bench/fleet_bench.py target/bench-smoke/fleet.json --quick
	$(PY) bench/report.py target/bench-smoke target/bench-smoke/benchmarks.md - --expect 1,2,3,4,5,8,9,10,11,12,13,14,15

lint-bench: python-venv ## ruff on bench/, gofmt on bench/etcd-go
	$(PY_VENV)/bin/ruff check bench && $(PY_VENV)/bin/ruff format --check bench
	@out=$$(gofmt -l bench/etcd-go); [ -z "$$out" ] || { echo "gofmt needed: $$out" >&2; exit 1; }
