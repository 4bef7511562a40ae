# The accord command (cli/ → target/debug/accord).
#
#   make test-cli      the CLI's tests (with a database: see scripts/with-postgres.sh)
#   make install-cli   cargo install of the accord binary (PREFIX/bin)

.PHONY: test-cli install-cli

PREFIX ?= /usr/local

TEST_SUITES += test-cli

test-cli: ## the accord command's tests (db)
	$(CARGO) test -p accord-coord-cli

install-cli: ## cargo install of the accord command into PREFIX/bin
	$(CARGO) install --locked --path cli --root "$(PREFIX)"
