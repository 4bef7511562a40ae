"""Run by `make test-python-wheel` in a venv that has nothing but the built wheel: the package
imports from there (not from the source folder) and works against the test database."""

from __future__ import annotations

import os
import sys
import uuid
from pathlib import Path

import accord

installed = Path(accord.__file__).resolve()
assert Path(sys.prefix).resolve() in installed.parents, f"accord imported from {installed}"
assert (installed.parent / "py.typed").exists(), "py.typed is missing from the wheel"
assert (installed.parent / "_accord.pyi").exists(), "the stubs are missing from the wheel"

url = os.environ["ACCORD_TEST_DATABASE_URL"]
namespace = f"wheel-{uuid.uuid4().hex[:8]}"
with accord.Client.connect(url, namespace=namespace) as client:
    lease = client.try_acquire("k", ttl=5)
    assert lease is not None and lease.fence > 0
    assert client.try_acquire("k") is None
    lease.release()
print(f"wheel check: accord {accord.__version__} from {installed.parent} works")
