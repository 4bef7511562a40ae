# The Python and Node packages people install without a compiler, built into dist/ (mk/dist.mk's
# `make dist` builds them with the crates and the C library), and tested as a user installs them.
#
#   make dist-python        the abi3 wheel for CPython ≥ 3.9, manylinux2014 (maturin --zig with
#                           PyPI's ziglang, so that the wheel asks for glibc 2.17, not this
#                           machine's; maturin checks the tag), and the sdist: dist/accord_coord-*
#   make dist-node          the npm tarballs, the napi-rs way: dist/accord-coord-<version>.tgz
#                           (loader, types, no addon) and one package per platform built here,
#                           dist/accord-coord-<platform>-<version>.tgz, listed in the first's
#                           optionalDependencies (node/scripts/dist.js)
#   make test-dist-python   the wheel into a fresh venv, no cargo/rustc on PATH, no package index:
#                           README's install line and Python quick start (tests/dist/python.sh)
#   make test-dist-node     the tarballs into an empty project, no cargo/rustc on PATH, npm
#                           offline: README's install line, the platform addon loads, README's
#                           Node quick start as ESM and CommonJS (tests/dist/node.sh)
#
# Platforms: node/package.json's napi.targets lists them, one line each, and node/npm/<platform>
# holds each one's package.json (`napi create-npm-dirs` writes it). This machine builds its own,
# linux-x64-gnu; a runner per platform would build the others (napi build --platform --release
# --target <triple>) into $(NODE_DIST_BUILD) before node/scripts/dist.js packs what is there.

DIST := dist
# zig links both packages against glibc 2.17 (maturin uses it for the wheel, napi through
# cargo-zigbuild for the addon): they install on older Linux than this machine's glibc 2.36.
PY_DIST_TOOLS := "ziglang>=0.13,<0.16" "cargo-zigbuild>=0.20,<0.25"
PY_DIST_TOOLS_STAMP := $(PY_VENV)/.accord-dist-tools
# The oldest glibc the wheel may need (maturin refuses a wheel that needs a newer one).
PY_DIST_COMPAT := manylinux2014
NODE_DIST_BUILD := target/dist-node
# Cargo's own target dir for the addon: sharing target/ with the wheel's zig build made each of the
# two rebuild most crates after the other (their build environments differ).
NODE_DIST_CARGO := target/dist-node-cargo

.PHONY: dist-python dist-node test-dist-python test-dist-node

TEST_SUITES += test-dist-python test-dist-node

$(PY_DIST_TOOLS_STAMP): mk/dist-pynode.mk | python-venv
	$(PY_VENV)/bin/python -m pip install --quiet --disable-pip-version-check $(PY_DIST_TOOLS)
	@touch $@

# This wheel is also the one .venv, the demo and the bench install (mk/python.mk: wheel-python,
# python-install). `make test` builds it in debug (DIST_PROFILE=debug, into target/dist-debug,
# as test-dist-c packs the debug libaccord): the same packing, tags and install lines, for a
# third of a release build's time; `make dist` and the bench build it in release. Either way
# with zig's linker (target/x86_64-unknown-linux-gnu); maturin finds zig through the venv's
# `python -m ziglang`, hence the venv first on PATH.
PY_DIST_FLAGS = $(if $(filter release,$(DIST_PROFILE)),--release --strip,)
dist-python: $(PY_DIST_TOOLS_STAMP) ## dist/: the Python abi3 wheel (manylinux2014, via zig) and the sdist
	@mkdir -p $(DIST) && rm -f $(DIST)/accord_coord-*
	PATH="$(CURDIR)/$(PY_VENV)/bin:$$PATH" $(PY_VENV)/bin/maturin build $(PY_DIST_FLAGS) --quiet \
	  --zig --compatibility $(PY_DIST_COMPAT) -m python/Cargo.toml --out $(DIST)
	PATH="$(CURDIR)/$(PY_VENV)/bin:$$PATH" $(PY_VENV)/bin/maturin sdist -m python/Cargo.toml --out $(DIST)
	@ls -l $(DIST)/accord_coord-*

# The release addon is built into $(NODE_DIST_BUILD) (with a loader and index.d.ts that
# node/scripts/dist.js compares with the committed ones), so that node/ keeps whatever addon it
# has (test-node's debug one). --cross-compile with a versioned target: cargo zigbuild (from
# .venv, with the venv's zig) links against glibc 2.17; the loader is the same.
# `make test` (DIST_PROFILE=debug) packs test-node's debug addon instead (build-node-debug:
# node/build/napi, with the loader and index.d.ts it generated), as test-dist-c packs the debug
# libaccord: the packing and the install lines are the same code, and no second build of the
# addon (a release one, with zig: six minutes of a 2-core machine) is paid for.
dist-node: node-deps $(PY_DIST_TOOLS_STAMP) ## dist/: the npm package and its linux-x64-gnu addon package (release, glibc ≥ 2.17)
	@mkdir -p $(DIST) && rm -f $(DIST)/accord-coord-*.tgz
	$(if $(filter release,$(DIST_PROFILE)),$(NODE_RELEASE_BUILD),@echo "dist-node: packing the debug addon of node/build/napi")
	cd node && node scripts/dist.js $(CURDIR)/$(NODE_DIST_ADDONS) $(CURDIR)/$(DIST)

NODE_RELEASE_BUILD = rm -rf $(NODE_DIST_BUILD) && cd node && PATH="$(CURDIR)/$(PY_VENV)/bin:$$PATH" \
  CARGO_TARGET_DIR=$(CURDIR)/$(NODE_DIST_CARGO) $(NAPI) build --platform --release --strip \
  --cross-compile --target x86_64-unknown-linux-gnu.2.17 -o $(CURDIR)/$(NODE_DIST_BUILD)
# Where dist-node takes the addon from: its own release build, or test-node's debug one.
NODE_DIST_ADDONS = $(if $(filter release,$(DIST_PROFILE)),$(NODE_DIST_BUILD),node/build/napi)

test-dist-python: dist-python ## the wheel in a fresh venv without Rust: README's install line and quick start
	PYTHON=$(PYTHON) DIST_DIR=$(CURDIR)/$(DIST) tests/dist/python.sh

# build-node-debug: the addon that make test's dist-node packs (DIST_PROFILE=debug).
test-dist-node: build-node-debug dist-node ## the npm tarballs in an empty project without Rust, offline: README's quick start
	DIST_DIR=$(CURDIR)/$(DIST) tests/dist/node.sh
