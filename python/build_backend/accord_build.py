"""The build backend of accord-coord's sdist: maturin's, but refusing at once without Rust.

pip falls back to the sdist on a platform no wheel is published for. maturin's backend then
fetches and installs a Rust toolchain into a cache by itself (puccinialin) when `cargo` is not
on PATH: a download of hundreds of megabytes nobody asked for, before a long compile. This
backend stops instead, with one message saying which platforms have a wheel and what to do;
with `cargo` on PATH it is maturin's backend unchanged. Making the sdist compiles nothing, so
those hooks are maturin's as they are.
"""

from __future__ import annotations

import shutil
from collections.abc import Mapping
from typing import Any, Optional

import maturin
from maturin import build_sdist, get_requires_for_build_sdist

__all__ = [
    "build_editable",
    "build_sdist",
    "build_wheel",
    "get_requires_for_build_editable",
    "get_requires_for_build_sdist",
    "get_requires_for_build_wheel",
    "prepare_metadata_for_build_editable",
    "prepare_metadata_for_build_wheel",
]

NO_RUST = (
    "accord-coord: no wheel of this version matches this platform (wheels: Linux x86_64 with "
    "glibc >= 2.17, CPython >= 3.9), and building it from source needs Rust's `cargo` on PATH, "
    "which is not there. Install Rust (https://rustup.rs) and run pip again, or pass "
    "`--only-binary accord-coord` to pip to install wheels only."
)

_Settings = Optional[Mapping[str, Any]]


def _require_cargo() -> None:
    if shutil.which("cargo") is None:
        raise SystemExit(NO_RUST)


def get_requires_for_build_wheel(config_settings: _Settings = None) -> list[str]:
    _require_cargo()
    return list(maturin.get_requires_for_build_wheel(config_settings))


def prepare_metadata_for_build_wheel(
    metadata_directory: str, config_settings: _Settings = None
) -> str:
    _require_cargo()
    return str(maturin.prepare_metadata_for_build_wheel(metadata_directory, config_settings))


def build_wheel(
    wheel_directory: str,
    config_settings: _Settings = None,
    metadata_directory: Optional[str] = None,
) -> str:
    _require_cargo()
    return str(maturin.build_wheel(wheel_directory, config_settings, metadata_directory))


def build_editable(
    wheel_directory: str,
    config_settings: _Settings = None,
    metadata_directory: Optional[str] = None,
) -> str:
    _require_cargo()
    return str(maturin.build_editable(wheel_directory, config_settings, metadata_directory))


get_requires_for_build_editable = get_requires_for_build_wheel
prepare_metadata_for_build_editable = prepare_metadata_for_build_wheel
