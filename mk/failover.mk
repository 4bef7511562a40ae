# Failover to a synchronous standby (O2, docs/deployment.md): scripts/failover-pair.sh makes a
# primary and a standby of its own (not the suite's shared server, which the test would stop),
# and the Rust and Python tests stop and promote them.
#
#   make test-failover      the Rust and Python failover tests against a fresh pair

.PHONY: test-failover
TEST_SUITES += test-failover

test-failover: python-install ## O2: clients in Rust and Python follow a promoted synchronous standby
	scripts/failover-pair.sh run sh -c '$(CARGO) test $(RUST_CRATES) --test failover && \
	  cd python && ../$(PY_VENV)/bin/pytest -p no:cacheprovider -q -ra tests/test_failover.py'
