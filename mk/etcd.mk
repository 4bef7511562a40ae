# The etcd cluster the etcd store's tests run on (scripts/with-etcd.sh). `make test` starts one
# around every suite (the Makefile's `test`), and test-rust builds the core with the feature
# `etcd`, so that every file core/tests/etcd*.rs runs there: a new one needs no edit here.
#
# The cluster's server is the system's etcd (Debian's etcd-server, 3.4) unless ETCD_BIN names
# another: `make etcd-3.6` builds a current one from its Go module, and
# `make test-etcd ETCD_BIN=$(ETCD_36)` runs the same tests on it.

WITH_ETCD := scripts/with-etcd.sh
# The etcd server that tests/etcd-server/go.mod pins (3.6.x), built into target/.
ETCD_36 := target/etcd-3.6/etcd

# The quick starts' runs on the test cluster (test-rust, test-c, test-go): under a key prefix of
# their own, shared as the PostgreSQL runs share the namespace "reports" (each quick start
# resets the key it marks done). $(call on_etcd,COMMAND) runs COMMAND with ACCORD_URL naming it,
# or says that the run is skipped when ACCORD_TEST_ETCD_URL is not set (the suites' make
# runs inside scripts/with-etcd.sh, which sets it, so it is known when the recipe expands).
# $(call etcd_test_url,PREFIX): the test cluster's URL with the key prefix PREFIX.
etcd_test_url = $(ACCORD_TEST_ETCD_URL)$(if $(findstring ?,$(ACCORD_TEST_ETCD_URL)),&,?)prefix=$(1)
ETCD_QUICKSTART_URL = $(call etcd_test_url,/accord-test/quickstart)
on_etcd = $(call if_etcd,ACCORD_URL="$(ETCD_QUICKSTART_URL)" $(1))
# $(call if_etcd,COMMAND): COMMAND, which finds the test cluster itself (the polyglot pool run),
# or the same "skipped" line.
if_etcd = $(if $(ACCORD_TEST_ETCD_URL),$(1),@echo "skipped on etcd, ACCORD_TEST_ETCD_URL is not set: $(1)")

.PHONY: test-etcd etcd-3.6 test-etcd-3.6

test-etcd: ## the etcd tests alone (core/tests/etcd*.rs) on a throwaway 3-member cluster (ETCD_BIN=… picks the server)
	ETCD_BIN=$(ETCD_BIN) $(WITH_ETCD) $(CARGO) test $(RUST_CRATES) \
	  $(patsubst core/tests/%.rs,--test %,$(wildcard core/tests/etcd*.rs))

etcd-3.6: ## build etcd 3.6 (the version tests/etcd-server/go.mod pins) into target/etcd-3.6/etcd
	cd tests/etcd-server && GOTOOLCHAIN=local go build -trimpath -o ../../$(ETCD_36) .
	$(ETCD_36) --version

# What .ci/run runs after `make test`: the etcd tests once more, on etcd 3.6 (`make test` runs
# them on the system's 3.4). The build is Go's: a few minutes from a cold cache, seconds after.
test-etcd-3.6: etcd-3.6 ## the etcd tests on etcd 3.6 (make etcd-3.6), on a throwaway cluster of it
	$(MAKE) --no-print-directory test-etcd ETCD_BIN=$(ETCD_36)
