# The Node.js package (node/: the napi-rs crate `accord-node` and the `accord-coord` npm package;
# mk/dist-pynode.mk packs it for people to install).
# npm packages stay under node/ (installed from the committed package-lock.json); nothing global.
#
#   make test-node    npm install, the addon built (debug), tsc on the examples, then node --test
#                     against a database (see scripts/with-postgres.sh): L1–L9, N1–N6,
#                     AbortSignal, process exit, bad arguments, examples, the Rust contender,
#                     the generated index.js/index.d.ts fresh, what npm pack takes
#   make lint-node    the examples and the committed index.d.ts pass `tsc --strict` (no database)
#   make build-node   the release addon in node/ (what the bench loads)
#   make develop-node the debug addon in node/ (build-node-debug), for `require` from node/ while
#                     changing the code: much quicker to rebuild than build-node

NPM ?= npm
NODE_STAMP := node/node_modules/.accord-npm-ci
NAPI := node_modules/.bin/napi

.PHONY: node-deps build-node build-node-debug develop-node lint-node test-node

TEST_SUITES += test-node
LINTS += lint-node

# `npm install` rather than `npm ci`: the registry reached here serves @napi-rs/cli's optional
# native helpers for this platform only, so the lock cannot record the others, and `npm ci`
# refuses a lock that lacks them. The versions installed are the locked ones all the same.
$(NODE_STAMP): node/package.json node/package-lock.json
	cd node && $(NPM) install --no-audit --no-fund --loglevel=error
	@touch $@

node-deps: $(NODE_STAMP) ## npm install in node/ (from the committed lock)

# napi builds for an explicit target (target/<triple>/), where the Python wheel's zig build
# (mk/dist-pynode.mk) builds too, with another linker and environment: sharing that folder, each
# rebuilt every crate after the other (two minutes of this 2-core machine each time, three times
# in a `make test`). The addon has a cargo folder of its own.
NODE_CARGO := $(CURDIR)/target/node-cargo

build-node: node-deps ## the release addon in node/ (what the bench loads); regenerates index.js/.d.ts
	cd node && CARGO_TARGET_DIR=$(NODE_CARGO) $(NAPI) build --platform --release

# Built into node/build/ so that the committed loader and index.d.ts are left as they are for
# the test that checks them fresh; only the addon is copied next to them.
build-node-debug: node-deps ## the debug addon, copied into node/ (what test-node uses)
	cd node && rm -rf build/napi && CARGO_TARGET_DIR=$(NODE_CARGO) $(NAPI) build --platform -o build/napi \
	  && cp build/napi/accord.*.node .

develop-node: build-node-debug ## debug addon in node/ for require('./node') while changing the code

lint-node: node-deps ## tsc --strict on the examples and the committed index.d.ts
	cd node && node_modules/.bin/tsc -p tsconfig.json

test-node: lint-node build-node-debug ## lint-node, the debug addon, then node --test (db)
	$(CARGO) build $(RUST_CRATES) --example contend
	cd node && node --test --test-timeout=180000 test/*.test.js
