# The chaos run (chaos/run.py, docs/reliability.md): workers in Rust, Python, Node, C, Go and
# `accord run` hold leases and make fenced writes (accord's check_fence in the write's
# transaction, through each language's helper) on a durable primary with a synchronous
# standby (scripts/failover-pair.sh, ACCORD_PAIR_FSYNC=on) while a seeded nemesis kills -9,
# SIGSTOPs, terminates backends, restarts and crashes the primary, fails over, and freezes or
# cuts a proxied worker's connections. Beside them, the recipes: a source notifies and publishes
# to a stream, subscribers (Python, Node, one proxied) listen and read it, fleet members (Python,
# Node) share shards, and the nemesis also kills members and readers. The checker judges from
# audit tables the server fills (and the stream's own table).
#
#   make chaos        the full run (CHAOS_DURATION=300 s of faults, CHAOS_SEED=1), writes
#                     docs/reliability.md; exit 1 on any violation
#   make test-chaos   a short run (every fault kind at least once), part of `make test`
#
# On etcd (chaos/etcd_run.py; the report's section "On etcd"): Rust workers on a throwaway
# 3-member cluster (scripts/with-etcd.sh), their fenced writes to a throwaway PostgreSQL (every
# other worker also claims from a work pool: claim, fenced write, done), while
# the nemesis kills -9 the leader member and a follower, freezes and cuts one member's proxy,
# and kills -9 and SIGSTOPs workers; the audit is a watch of the run's prefix from revision 1.
#
#   make chaos-etcd       the etcd run alone (CHAOS_ETCD_DURATION=120 s), writes its section of
#                         docs/reliability.md; `make chaos` runs it after the PostgreSQL run
#   make test-chaos-etcd  a short one (every fault kind once, within a minute), in `make test`

.PHONY: chaos chaos-build test-chaos lint-chaos chaos-etcd chaos-etcd-build test-chaos-etcd

TEST_SUITES += test-chaos test-chaos-etcd
LINTS += lint-chaos

CHAOS_SEED ?= 1
CHAOS_DURATION ?= 300
CHAOS_ETCD_DURATION ?= 120
CHAOS_BIN := target/chaos
CHAOS_RUN = ACCORD_PAIR_FSYNC=on scripts/failover-pair.sh run $(PY) chaos/run.py

# The C and Go workers link the debug libaccord (as the demo's do) and libpq.
# The stamp of mk/demo.mk (read after this file, so named here): the package installed.
chaos-build: $(PY_VENV)/.accord-demo-python build-node-debug
	$(MAKE) --no-print-directory build-c C_PROFILE=debug
	$(CARGO) build $(RUST_CRATES) --example chaos_worker --bin accord
	mkdir -p $(CHAOS_BIN) $(GO_LIB_DIR) && cp target/debug/libaccord.a $(GO_LIB_DIR)/libaccord.a
	$(CC) -std=c11 -Wall -Wextra -Werror -O1 -Iinclude $$(pkg-config --cflags libpq) \
	  -o $(CHAOS_BIN)/worker_c chaos/workers/worker.c target/debug/libaccord.a \
	  $$(pkg-config --libs libpq) -lpthread -ldl -lm
	cd chaos/go && go vet ./... && go build -o ../../$(CHAOS_BIN)/worker_go .

chaos: chaos-build ## the full chaos run: every language, every fault, then on etcd; writes docs/reliability.md (CHAOS_SEED, CHAOS_DURATION)
	$(CHAOS_RUN) --seed $(CHAOS_SEED) --duration $(CHAOS_DURATION) --require-all \
	  --report docs/reliability.md
	$(MAKE) --no-print-directory chaos-etcd

# The Rust worker with the etcd store in it (the same binary serves the PostgreSQL run), and
# the Python package, through which the run offers its work pool.
chaos-etcd-build: $(PY_VENV)/.accord-demo-python
	$(CARGO) build $(RUST_CRATES) --example chaos_worker

# Each starts its own PostgreSQL and etcd cluster unless the environment names them (as
# `make test` does).
chaos-etcd: chaos-etcd-build python-venv ## the chaos run on etcd: member kills, partitions, client kills; its section of docs/reliability.md (CHAOS_ETCD_DURATION)
	$(WITH_PG) $(WITH_ETCD) $(PY) chaos/etcd_run.py --seed $(CHAOS_SEED) \
	  --duration $(CHAOS_ETCD_DURATION) --require-all --report docs/reliability.md

test-chaos-etcd: chaos-etcd-build python-venv ## a short chaos run on etcd: every fault kind once, no violation allowed (db, etcd)
	$(WITH_PG) $(WITH_ETCD) $(PY) chaos/etcd_run.py --seed $(CHAOS_SEED) --duration 20 \
	  --gap 0.5 1.5 --require-all

test-chaos: chaos-build ## a short chaos run: every fault kind once, no violation allowed
	$(CHAOS_RUN) --seed $(CHAOS_SEED) --duration 40 --gap 0.5 1.5 --require-all

lint-chaos: python-venv ## ruff and mypy --strict on chaos/, gofmt on chaos/go
	$(PY_VENV)/bin/ruff check chaos && $(PY_VENV)/bin/ruff format --check chaos
	MYPYPATH=python $(PY_VENV)/bin/mypy --strict chaos/run.py chaos/etcd_run.py chaos/workers/worker.py \
	  chaos/workers/source.py chaos/workers/subscriber.py chaos/workers/member.py
	@out=$$(gofmt -l chaos/go); [ -z "$$out" ] || { echo "gofmt needed: $$out" >&2; exit 1; }
