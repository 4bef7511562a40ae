"""The build backend of accord-coord's sdist: maturin's, but refusing at once without Rust.

pip falls back to the sdist on a platform no wheel is published for. maturin's backend then
fetches and installs a Rust toolchain into a cache by itself (puccinialin) when `cargo` is not
on PATH, a download of hundreds of megabytes the user never asked for, followed by a long
compile. This backend stops instead, with one message saying which platforms have a wheel and
what to do; with `cargo` on PATH it is maturin's backend unchanged.
"""

from __future__ import annotations

import shutil
from typing import Any, Mapping, Optional

import maturin

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
    return maturin.get_requires_for_build_wheel(config_settings)


def get_requires_for_build_editable(config_settings: _Settings = None) -> list[str]:
    _require_cargo()
    return maturin.get_requires_for_build_editable(config_settings)


def prepare_metadata_for_build_wheel(
    metadata_directory: str, config_settings: _Settings = None
) -> str:
    _require_cargo()
    return maturin.prepare_metadata_for_build_wheel(metadata_directory, config_settings)


def build_wheel(
    wheel_directory: str, config_settings: _Settings = None, metadata_directory: Optional[str] = None
) -> str:
    _require_cargo()
    return maturin.build_wheel(wheel_directory, config_settings, metadata_directory)


def build_editable(
    wheel_directory: str, config_settings: _Settings = None, metadata_directory: Optional[str] = None
) -> str:
    _require_cargo()
    return maturin.build_editable(wheel_directory, config_settings, metadata_directory)


# Making an sdist compiles nothing.
get_requires_for_build_sdist = maturin.get_requires_for_build_sdist
build_sdist = maturin.build_sdist
