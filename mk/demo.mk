# The polyglot demo (demo/): ten workers, two per language (Rust, Python, Node, C, Go), share one
# store (ACCORD_URL, default an SQLite file in a temp directory) and process 200 tasks; one is
# killed mid-task; a live view, then a summary checked from the store (exit 1 if a check fails).
#
#   make demo                     build what is missing, then run demo/run.py
#   make test-demo                the same with 60 tasks, plain output, against ACCORD_TEST_DATABASE_URL
#   make demo-etcd                the demo on a throwaway 3-member etcd cluster (scripts/with-etcd.sh)
#   make test-demo-etcd           test-demo on the etcd test cluster (ACCORD_TEST_ETCD_URL), as
#                                 `make test` runs it; skipped without one
#   make demo-fleet               a fleet of Rust, Python and Node workers splits 64 shards live
#                                 (demo/fleet.py): one joins, one is killed, the shards move
#   make test-demo-fleet          the same with 16 shards and plain output, on the embedded store

.PHONY: demo demo-run demo-build test-demo demo-etcd test-demo-etcd demo-fleet demo-fleet-build \
  test-demo-fleet

TEST_SUITES += test-demo test-demo-etcd test-demo-fleet

DEMO_BIN := target/demo

# The Python package is reinstalled only when its sources or the core's changed.
DEMO_PY_STAMP := $(PY_VENV)/.accord-demo-python
$(DEMO_PY_STAMP): $(shell find core/src python/src python/accord python/Cargo.toml python/pyproject.toml -type f 2>/dev/null)
	$(MAKE) --no-print-directory python-install DIST_PROFILE=$(DIST_PROFILE)
	@touch $@

# The C and Go workers link the debug libaccord (C_PROFILE=debug: faster to build).
demo-build: $(DEMO_PY_STAMP) build-node-debug
	$(MAKE) --no-print-directory build-c C_PROFILE=debug
	$(CARGO) build $(RUST_CRATES) --example demo_worker
	mkdir -p $(DEMO_BIN) $(GO_LIB_DIR) && cp target/debug/libaccord.a $(GO_LIB_DIR)/libaccord.a
	$(CC) -std=c11 -Wall -Wextra -Werror -O1 -Iinclude -o $(DEMO_BIN)/worker_c demo/worker.c \
	  target/debug/libaccord.a -lpthread -ldl -lm
	cd demo/go && go vet ./... && go build -o ../../$(DEMO_BIN)/worker_go .

demo: demo-run ## the polyglot demo: ten workers, five languages, one store (SQLite unless ACCORD_URL)

demo-run: demo-build
	$(PY) demo/run.py

test-demo: demo-build ## the demo with 60 tasks and plain output, on PostgreSQL (db)
	ACCORD_URL="$$ACCORD_TEST_DATABASE_URL" DEMO_TASKS=60 DEMO_PLAIN=1 DEMO_DEADLINE=60 $(PY) demo/run.py

# On etcd under a key prefix of its own. The throwaway cluster of demo-etcd is the plain one
# (ACCORD_TEST_ETCD_SECURE=0: no TLS and auth clusters beside it, which only the tests use).
DEMO_ETCD_PREFIX := /accord-demo

demo-etcd: demo-build ## the demo on a throwaway 3-member etcd cluster, stopped when it ends
	ACCORD_TEST_ETCD_SECURE=0 $(WITH_ETCD) sh -c \
	  'ACCORD_URL="$$ACCORD_TEST_ETCD_URL?prefix=$(DEMO_ETCD_PREFIX)" $(PY) demo/run.py'

test-demo-etcd: demo-build ## test-demo on the etcd test cluster (etcd)
	$(call if_etcd,ACCORD_URL="$(call etcd_test_url,$(DEMO_ETCD_PREFIX))" \
	  DEMO_TASKS=60 DEMO_PLAIN=1 DEMO_DEADLINE=60 $(PY) demo/run.py)

demo-fleet-build: $(DEMO_PY_STAMP) build-node-debug
	$(CARGO) build $(RUST_CRATES) --example contend

demo-fleet: demo-fleet-build ## a fleet of workers in three languages splitting 64 shards, live (SQLite unless ACCORD_URL)
	$(PY) demo/fleet.py

test-demo-fleet: demo-fleet-build ## the fleet demo with 16 shards and plain output, on the embedded store
	env -u ACCORD_URL DEMO_SHARDS=16 DEMO_PLAIN=1 DEMO_DEADLINE=60 $(PY) demo/fleet.py
