# The packages people install (README.md, "Install"), built into dist/ by `make dist`, and the
# tests that install each one as a user does: in a fresh directory under /tmp, with no Rust
# toolchain on PATH (scripts/without-rust.sh) where the user needs none, running README's install
# lines as written and a quick start against the embedded store (tests/dist/).
#
#   make dist            every package below, and the Python and Node ones (mk/dist-pynode.mk)
#   make dist-crates     dist/crates/: accord-coord and accord-coord-cli (cargo package, verified)
#   make dist-c          dist/libaccord-VERSION-linux-x86_64.tar.gz: a prefix with the header,
#                        libaccord.so/.a, accord.pc and the CMake package config
#   make dist-go         dist/goproxy/: the Go module with its prebuilt libaccord.a, as a Go
#                        module proxy serves it (docs/releasing.md: how a release publishes it)
#   make test-dist-c / test-dist-go / test-dist-rust    each installed and run as a user would
#   make lint-dist       one version everywhere (scripts/check-versions.py), the crate's docs
#                        build without a warning, ruff on scripts/
#
# One version for all: [workspace.package] version in Cargo.toml (ACCORD_VERSION, mk/c.mk).
#
# `make dist` builds libaccord in release (about 6 CPU-minutes from scratch). The tests package
# the debug libaccord that test-c has built already, into target/dist-debug, so that `make test`
# pays for no release build: the packaging, the layout and the install lines are the same code.
# `make test-dist-c test-dist-go DIST_PROFILE=release` tests the release packages of dist/.

.PHONY: dist dist-crates dist-c dist-go test-dist-c test-dist-go test-dist-rust lint-dist

DIST_PROFILE ?= release
# Every test target that installs a package: the debug one (make test builds nothing in release).
# Target-specific, so the packages these targets make (dist-c, dist-python, dist-node, the
# wheel .venv installs) are debug ones in target/dist-debug; `make dist` builds dist/ in release.
test-dist-c test-dist-go test-dist-python test-dist-node: DIST_PROFILE = debug
test-python test-python-wheel test-failover test-demo test-demo-fleet test-polyglot: DIST_PROFILE = debug
test-chaos test-chaos-etcd: DIST_PROFILE = debug
# Recursive (=): the profile is target-specific.
DIST = $(if $(filter release,$(DIST_PROFILE)),dist,target/dist-$(DIST_PROFILE))
# Staging (the tarball's and the Go module's trees before they are packed): under target/.
DIST_STAGE = target/dist-stage-$(DIST_PROFILE)
DIST_PLATFORM := $(shell uname -s | tr A-Z a-z)-$(shell uname -m)
DIST_C_NAME := libaccord-$(ACCORD_VERSION)-$(DIST_PLATFORM)
DIST_C_TARBALL = $(DIST)/$(DIST_C_NAME).tar.gz
DIST_GOPROXY = $(DIST)/goproxy
GO_MODULE := $(shell sed -n 's/^module //p' bindings/go/go.mod)
# The Go module's prebuilt library: only this platform's is built here (bindings/go/accord.go
# links lib/linux_amd64; elsewhere users build with -tags accord_pkgconfig).
DIST_GO_PLATFORM := linux_amd64
# Tarballs and zips record the last commit's time, not the build's: the same tree packs alike.
SOURCE_DATE_EPOCH ?= $(shell git log -1 --format=%ct 2>/dev/null || date +%s)
export SOURCE_DATE_EPOCH
# The Python wheels and npm packages are mk/dist-pynode.mk's, when it is there.
DIST_PYNODE := $(if $(wildcard mk/dist-pynode.mk),dist-python dist-node)

TEST_SUITES += test-dist-c test-dist-go test-dist-rust
LINTS += lint-dist

dist: dist-crates dist-c dist-go $(DIST_PYNODE) ## every package into dist/: crates, libaccord tarball, Go module proxy tree, wheels, npm
	@ls -l $(DIST) $(DIST)/crates

# `cargo package` verifies each crate by building it from its packed sources; the CLI's
# dependency on the unpublished accord-coord is met from the .crate packed just before (cargo
# packs the two together). A warning (missing metadata, a file left out) fails the target.
dist-crates: ## dist/crates/: accord-coord and accord-coord-cli packaged and verified, docs built
	RUSTDOCFLAGS="-D warnings" $(CARGO) doc --no-deps -p accord-coord
	$(CARGO) package -p accord-coord -p accord-coord-cli 2>target/dist-package.log || \
	  { cat target/dist-package.log >&2; exit 1; }
	@cat target/dist-package.log
	@! grep -q '^warning' target/dist-package.log || { echo "cargo package warned (above)" >&2; exit 1; }
	mkdir -p $(DIST)/crates
	cp target/package/accord-coord-$(ACCORD_VERSION).crate \
	  target/package/accord-coord-cli-$(ACCORD_VERSION).crate $(DIST)/crates/

# The tarball is `make install` into a staging prefix (DIST_PROFILE's build), made relocatable:
# accord.pc's prefix becomes ${pcfiledir}/../.. (the CMake config finds itself already). The
# static library loses its debug info (Rust's standard library brings line tables): several MB.
dist-c: ## dist/libaccord-VERSION-linux-x86_64.tar.gz: header, .so/.a, accord.pc, CMake config (release)
	$(MAKE) --no-print-directory header-fresh C_PROFILE=$(DIST_PROFILE)
	rm -rf $(DIST_STAGE)/$(DIST_C_NAME)
	$(MAKE) --no-print-directory install C_PROFILE=$(DIST_PROFILE) PREFIX=$(CURDIR)/$(DIST_STAGE)/$(DIST_C_NAME)
	cd $(DIST_STAGE)/$(DIST_C_NAME) && \
	  sed -i 's|^prefix=.*|prefix=$${pcfiledir}/../..|' lib/pkgconfig/accord.pc && \
	  strip --strip-debug lib/libaccord.a && \
	  install -d share/accord/examples && \
	  install -m 644 $(CURDIR)/examples/c/quickstart.c $(CURDIR)/examples/c/CMakeLists.txt share/accord/examples/ && \
	  install -m 644 $(CURDIR)/LICENSE LICENSE && \
	  install -m 644 $(CURDIR)/bindings/c/README.md README.md
	mkdir -p $(DIST)
	tar --sort=name --owner=0 --group=0 --numeric-owner --mtime=@$(SOURCE_DATE_EPOCH) \
	  -C $(DIST_STAGE) -czf $(DIST_C_TARBALL) $(DIST_C_NAME)
	@ls -l $(DIST_C_TARBALL) $(DIST_STAGE)/$(DIST_C_NAME)/lib/libaccord.a $(DIST_STAGE)/$(DIST_C_NAME)/lib/libaccord.so.$(ACCORD_VERSION)

# The Go module as a release tag's tree holds it: bindings/go's committed files, plus lib/ with
# the header and this platform's static libaccord (the tarball's: release, no debug info), which
# main does not carry (git-ignored). scripts/goproxy.py packs it as GOPROXY serves it.
dist-go: dist-c ## dist/goproxy/: the Go module with its prebuilt static libaccord (go get needs no Rust)
	rm -rf $(DIST_STAGE)/go $(DIST_GOPROXY)/$(GO_MODULE)/@v/v$(ACCORD_VERSION).*
	mkdir -p $(DIST_STAGE)/go/lib/include $(DIST_STAGE)/go/lib/$(DIST_GO_PLATFORM)
	cd bindings/go && git ls-files -z | xargs -0 cp --parents -t $(CURDIR)/$(DIST_STAGE)/go/
	cp include/accord.h $(DIST_STAGE)/go/lib/include/accord.h
	cp $(DIST_STAGE)/$(DIST_C_NAME)/lib/libaccord.a $(DIST_STAGE)/go/lib/$(DIST_GO_PLATFORM)/libaccord.a
	python3 scripts/goproxy.py $(GO_MODULE) v$(ACCORD_VERSION) $(DIST_STAGE)/go $(DIST_GOPROXY)

test-dist-c: dist-c ## the libaccord tarball (debug; DIST_PROFILE=release: dist/'s): README's C install lines, no Rust on PATH
	tests/dist/c.sh $(DIST_C_TARBALL)

test-dist-go: dist-go ## go get through a file:// proxy, fresh GOPATH, no Rust on PATH; -tags accord_pkgconfig (debug lib)
	tests/dist/go.sh $(DIST_GOPROXY) $(DIST_C_TARBALL)

# Packs the core only (no verify: the test's own build of the unpacked crate is that check),
# and fails on cargo package's warnings, as dist-crates does.
test-dist-rust: ## a new cargo project depends on the packed accord-coord and runs the quick start
	$(CARGO) package -p accord-coord --no-verify 2>target/dist-package-core.log || \
	  { cat target/dist-package-core.log >&2; exit 1; }
	@! grep -q '^warning' target/dist-package-core.log || \
	  { cat target/dist-package-core.log >&2; echo "cargo package warned (above)" >&2; exit 1; }
	tests/dist/rust.sh target/package/accord-coord-$(ACCORD_VERSION).crate

lint-dist: python-venv ## one version in every package, accord-coord's docs without warnings, ruff on scripts/
	python3 scripts/check-versions.py
	RUSTDOCFLAGS="-D warnings" $(CARGO) doc --no-deps -p accord-coord --quiet
	$(PY_VENV)/bin/ruff check --no-cache --line-length 100 scripts && \
	  $(PY_VENV)/bin/ruff format --no-cache --check --line-length 100 scripts
