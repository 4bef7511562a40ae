# The Node.js bench (node/bench/, part of `make bench`; the contract is bench/README.md).
#
#   make bench-node   the release addon (build-node), node/bench's own packages (the peers:
#                     advisory-lock and pg, from its committed package-lock.json), then
#                     node/bench/bench.js against $ACCORD_TEST_DATABASE_URL, writing
#                     $(BENCH_OUT_DIR)/node.json. Run it with a database, e.g.
#                     scripts/with-postgres.sh make bench-node (ACCORD_BENCH_PAIRS=2000 for a quick look)
#
# build-node runs every time, on purpose: `make test-node` copies a debug addon over the release
# one in node/, and cargo makes the release build a quick no-op when nothing changed.

NPM ?= npm
NODE ?= node
BENCH_OUT_DIR ?= target/bench
BENCH_NODE_STAMP := node/bench/node_modules/.accord-npm-install

.PHONY: bench-node

# `npm install`, not `npm ci`: see the note in mk/node.mk. The lock pins the versions all the same.
$(BENCH_NODE_STAMP): node/bench/package.json node/bench/package-lock.json
	cd node/bench && $(NPM) install --no-audit --no-fund --loglevel=error
	@touch $@

bench-node: build-node $(BENCH_NODE_STAMP) ## the Node bench program, release addon → target/bench/node.json (db)
	@test -n "$$ACCORD_TEST_DATABASE_URL" || { echo "bench-node: ACCORD_TEST_DATABASE_URL is not set; run it as scripts/with-postgres.sh $(MAKE) bench-node" >&2; exit 1; }
	@mkdir -p $(BENCH_OUT_DIR)
	ACCORD_BENCH_URL="$${ACCORD_BENCH_URL:-$$ACCORD_TEST_DATABASE_URL}" ACCORD_BENCH_OUT=$(BENCH_OUT_DIR)/node.json \
	  ACCORD_BENCH_STATEMENTS=$(BENCH_OUT_DIR)/statements.json $(NODE) node/bench/bench.js
