# The Python package (python/: the pyo3 crate `accord-python` and the `accord` package, built by
# maturin; on PyPI `accord-coord`). Everything Python runs from a venv the Makefile makes in .venv (git-ignored), with
# packages from PyPI.
#
#   make test-python        install the wheel of dist-python (mk/dist-pynode.mk; a debug build
#                           here, as every test target's package) into .venv, pytest against a
#                           database (see scripts/with-postgres.sh), the lints, and the clean-venv
#                           wheel check
#   make lint-python        ruff + mypy --strict on the package, its stubs, examples and tests
#   make wheel-python       the wheel: dist-python's, in dist/ (target/dist-debug for the tests)
#   make test-python-wheel  the wheel installs into a clean venv and works there
#   make develop-python     a debug build installed editable into .venv (maturin develop): the
#                           quick loop while changing the code; not what the tests use

PYTHON ?= python3
PY_VENV := .venv
PY := $(PY_VENV)/bin/python
# Lint tools pinned to a minor version: their new rules must not break a fresh clone's `make test`.
# The fenced-write helpers' drivers (psycopg 3, psycopg2, asyncpg) are here for the tests only:
# accord depends on none of them.
PY_TOOLS := "maturin>=1.9.4,<2" "pytest>=8,<10" "pytest-asyncio>=1.0,<2" "pytest-timeout>=2,<3" \
	"mypy>=2.4,<2.5" "ruff>=0.17,<0.18" "psycopg[binary]>=3.2,<4" "psycopg2-binary>=2.9,<3" \
	"asyncpg>=0.30,<1"
PY_TOOLS_STAMP := $(PY_VENV)/.accord-python-tools
# The wheel of dist-python (mk/dist-pynode.mk), the one people install: in dist/ (release), or
# target/dist-debug for the test targets (DIST_PROFILE=debug, mk/dist.mk).
PY_WHEELS = $(DIST)
PY_CLEAN_VENV := target/python-clean-venv

.PHONY: python-venv python-install develop-python test-python lint-python wheel-python test-python-wheel

TEST_SUITES += test-python
LINTS += lint-python

# The venv and the tools, once (again when this file changes).
$(PY_TOOLS_STAMP): mk/python.mk
	@test -x $(PY) || $(PYTHON) -m venv $(PY_VENV)
	$(PY) -m pip install --quiet --disable-pip-version-check $(PY_TOOLS)
	@touch $@

python-venv: $(PY_TOOLS_STAMP) ## .venv with maturin, pytest (asyncio, timeout), mypy, ruff, psycopg, psycopg2, asyncpg

# The package as users install it: the wheel that goes to PyPI (dist-python). One build serves
# the tests, the demo and the clean-venv check (`pip install ./python` would be a second one, with
# another linker: it builds from source as the sdist does): a debug one for the test targets
# (mk/dist.mk), the release one for the demo, the bench and dist/.
python-install: python-venv wheel-python ## the wheel (dist-python's; release unless DIST_PROFILE=debug) into .venv, as users get it
	$(PY) -m pip install --quiet --disable-pip-version-check --no-index --no-deps --force-reinstall \
	  $$(ls -t $(PY_WHEELS)/accord_coord-*.whl | head -n 1)

# For working on the code: `maturin develop` builds the extension in debug (target/debug, shared
# with `cargo build`) and installs the package editable into .venv: the compiled module goes into
# python/accord/ (git-ignored) and the venv points at python/, so a change to the Python sources
# needs no rebuild, and one to the Rust sources this target again. This replaces the release
# install of python-install; test-python (and the demo, whose stamp is dropped here) put that back.
develop-python: python-venv ## debug build of the Python package, installed editable into .venv
	VIRTUAL_ENV=$(CURDIR)/$(PY_VENV) PATH="$(CURDIR)/$(PY_VENV)/bin:$$PATH" \
	  $(PY_VENV)/bin/maturin develop --quiet -m python/Cargo.toml
	@rm -f $(DEMO_PY_STAMP)

lint-python: python-venv ## ruff and mypy --strict on python/
	cd python && ../$(PY_VENV)/bin/ruff check . && ../$(PY_VENV)/bin/ruff format --check .
	cd python && ../$(PY_VENV)/bin/mypy --strict

# The Rust contender of the cross-language test is core/examples/contend.rs. pytest runs from
# python/ through the venv's script (not `python -m`), so that `accord` is the installed package,
# not the source folder; stubtest (from target/, for the same reason) checks that the stubs
# match the compiled module.
test-python: python-install lint-python ## the wheel installed (debug), stubtest, pytest, then the clean-venv wheel check (db)
	mkdir -p target && cd target && $(CURDIR)/$(PY) -m mypy.stubtest accord
	$(CARGO) build $(RUST_CRATES) --example contend
	cd python && ../$(PY_VENV)/bin/pytest -p no:cacheprovider -q -ra
	$(MAKE) --no-print-directory test-python-wheel

wheel-python: dist-python ## the wheel: dist-python's (abi3, manylinux2014), in dist/ (release) or target/dist-debug

# A venv with nothing but the wheel: import, connect, try_acquire, release.
test-python-wheel: wheel-python ## the wheel installs into a clean venv and works there
	rm -rf $(PY_CLEAN_VENV)
	$(PYTHON) -m venv $(PY_CLEAN_VENV)
	$(PY_CLEAN_VENV)/bin/pip install --quiet --disable-pip-version-check --no-index \
	  $$(ls -t $(PY_WHEELS)/accord_coord-*.whl | head -n 1)
	cd target && $(CURDIR)/$(PY_CLEAN_VENV)/bin/python $(CURDIR)/python/tests/wheel_check.py
