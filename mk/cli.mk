# The accord command (cli/ → target/debug/accord).
#
#   make test-cli      the CLI's tests alone (with a database: see scripts/with-postgres.sh);
#                      `make test` runs them in test-rust, with the other crates' (one build)
#   make install-cli   cargo install of the accord binary (PREFIX/bin)

.PHONY: test-cli install-cli

PREFIX ?= /usr/local

test-cli: ## the accord command's tests alone (db; make test runs them in test-rust)
	$(CARGO) test $(RUST_CRATES) --bin accord $(patsubst cli/tests/%.rs,--test %,$(wildcard cli/tests/*.rs))

install-cli: ## cargo install of the accord command into PREFIX/bin
	$(CARGO) install --locked --path cli --root "$(PREFIX)"
