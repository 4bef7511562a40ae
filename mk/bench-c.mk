# Benchmarks of the C ABI and of the Go package (bench/README.md has the contract):
#
#   scripts/with-postgres.sh make bench-c bench-go    results in $(BENCH_OUT_DIR)/c.json, go.json
#   ACCORD_BENCH_PAIRS=2000 ACCORD_BENCH_WARMUP=200   fewer pairs, for a quick run
#
# Both link a RELEASE libaccord, installed (`make install`) into a bench-only prefix and loaded
# from there as a shared library (rpath). The tests own bindings/go/lib (a debug libaccord.a), and
# the Go build cache does not hash external static libraries, so a static link could silently
# reuse a stale or debug build; a shared library is read when the bench runs, and the make
# targets check that the binaries load the one installed here, the bench programs report the
# path they mapped, and cmp checks that the installed library is target/release's.

BENCH_OUT_DIR ?= target/bench
BENCH_PREFIX := $(CURDIR)/target/bench-install
BENCH_BIN := target/bench-bin
# DT_RPATH (not RUNPATH): wins over an LD_LIBRARY_PATH that names another libaccord.
BENCH_RPATH = -Wl,--disable-new-dtags,-rpath,$(BENCH_PREFIX)/lib
BENCH_PKG_CONFIG = PKG_CONFIG_PATH=$(BENCH_PREFIX)/lib/pkgconfig pkg-config

.PHONY: bench-lib build-bench-c build-bench-go bench-c bench-go bench-out-dir

# The release libaccord (header, libraries, accord.pc) in target/bench-install.
bench-lib:
	$(MAKE) --no-print-directory install C_PROFILE=release PREFIX=$(BENCH_PREFIX)
	@cmp -s target/release/libaccord.so $(BENCH_PREFIX)/lib/libaccord.so.$(ACCORD_VERSION) || { \
	  echo "bench-lib: $(BENCH_PREFIX)/lib/libaccord.so.$(ACCORD_VERSION) is not target/release's" >&2; exit 1; }

# Fails unless binary $(1) loads libaccord from the bench prefix.
bench_check_lib = @ldd $(1) | grep -F 'libaccord.so.0 => $(BENCH_PREFIX)/lib/libaccord.so.0' >/dev/null || { \
	  echo "$(1) does not load the release libaccord of $(BENCH_PREFIX):" >&2; ldd $(1) >&2; exit 1; }

build-bench-c: bench-lib
	@mkdir -p $(BENCH_BIN)
	$(CC) -O2 -std=c11 -Wall -Wextra -Werror -o $(BENCH_BIN)/bench_accord_c bench/c/bench_accord.c \
	  $$($(BENCH_PKG_CONFIG) --cflags --libs accord) $(BENCH_RPATH)
	$(call bench_check_lib,$(BENCH_BIN)/bench_accord_c)

build-bench-go: bench-lib
	@mkdir -p $(BENCH_BIN)
	@out=$$(gofmt -l bench/go); [ -z "$$out" ] || { echo "gofmt needed: $$out" >&2; exit 1; }
	cd bench/go && export PKG_CONFIG_PATH=$(BENCH_PREFIX)/lib/pkgconfig CGO_LDFLAGS="-O2 $(BENCH_RPATH)" && \
	  go vet -tags accord_pkgconfig ./... && \
	  go build -tags accord_pkgconfig -o $(CURDIR)/$(BENCH_BIN)/bench_accord_go .
	$(call bench_check_lib,$(BENCH_BIN)/bench_accord_go)

bench-out-dir:
	@mkdir -p $(BENCH_OUT_DIR)
	@[ -n "$$ACCORD_TEST_DATABASE_URL" ] || { \
	  echo "ACCORD_TEST_DATABASE_URL is not set: run through scripts/with-postgres.sh" >&2; exit 1; }

bench-c: bench-out-dir build-bench-c ## the C bench program, release libaccord → target/bench/c.json (db)
	ACCORD_BENCH_URL="$${ACCORD_BENCH_URL:-$$ACCORD_TEST_DATABASE_URL}" ACCORD_BENCH_OUT=$(BENCH_OUT_DIR)/c.json \
	  $(BENCH_BIN)/bench_accord_c

bench-go: bench-out-dir build-bench-go ## the Go bench program, release libaccord → target/bench/go.json (db)
	ACCORD_BENCH_URL="$${ACCORD_BENCH_URL:-$$ACCORD_TEST_DATABASE_URL}" ACCORD_BENCH_OUT=$(BENCH_OUT_DIR)/go.json \
	  $(BENCH_BIN)/bench_accord_go
