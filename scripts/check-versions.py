#!/usr/bin/env python3
"""Fails when a package of accord carries another version than the workspace's.

One version for everything (README.md, "Install"): [workspace.package] version in Cargo.toml.
Checked: every crate of the workspace (cargo metadata) and the version the CLI's dependency on
the core asks for; the Python package (its version must come from Cargo: maturin's dynamic
version); node/package.json, the npm platform packages (node/npm/*/package.json) and the
dependencies on them; the Go module's Version constant; the pkg-config and CMake templates
(they must take the version from the build, not spell one); the version named in README.md's
install lines; and a CHANGELOG.md section for it. `make lint` runs this (lint-versions).

    scripts/check-versions.py          from the repository's root
"""

import json
import re
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def main() -> int:
    cargo = tomllib.loads((ROOT / "Cargo.toml").read_text())
    want = cargo["workspace"]["package"]["version"]
    problems: list[str] = []

    def check(what: str, got: object) -> None:
        if got != want:
            problems.append(f"{what} is {got!r}, not the workspace's {want!r}")

    # Crates: the resolved version of every member, whether inherited or spelled out.
    meta = json.loads(
        subprocess.run(
            ["cargo", "metadata", "--no-deps", "--format-version", "1", "--offline"],
            cwd=ROOT,
            check=True,
            capture_output=True,
            text=True,
        ).stdout
    )
    for package in meta["packages"]:
        manifest = Path(package["manifest_path"]).relative_to(ROOT)
        check(f"crate {package['name']} ({manifest})", package["version"])
    # What `cargo package` of the CLI records as its dependency on the core.
    core_dep = cargo["workspace"]["dependencies"]["accord"]
    check("the version of [workspace.dependencies] accord in Cargo.toml", core_dep.get("version"))

    # Python: maturin takes the version from Cargo unless pyproject.toml spells one.
    project = tomllib.loads((ROOT / "python/pyproject.toml").read_text())["project"]
    if "version" in project:
        check("version in python/pyproject.toml", project["version"])
    elif "version" not in project.get("dynamic", []):
        problems.append("python/pyproject.toml has no version and does not take Cargo's (dynamic)")

    # npm: the main package, the per-platform packages, and what depends on them.
    manifests = [ROOT / "node/package.json", *sorted(ROOT.glob("node/npm/*/package.json"))]
    names = set()
    for path in manifests:
        names.add(json.loads(path.read_text()).get("name"))
    for path in manifests:
        data = json.loads(path.read_text())
        rel = path.relative_to(ROOT)
        check(f"version in {rel}", data.get("version"))
        for field in ("dependencies", "optionalDependencies", "peerDependencies"):
            for name, spec in data.get(field, {}).items():
                if name in names:
                    check(f"{field}.{name} in {rel}", spec)

    # Go: the module's Version constant (its test checks it against the linked library).
    go = (ROOT / "bindings/go/accord.go").read_text()
    found = re.search(r'^const Version = "([^"]*)"', go, re.MULTILINE)
    check("const Version in bindings/go/accord.go", found and found.group(1))

    # C: the templates are filled in by `make install` / `make dist-c` from Cargo.toml.
    for rel in (
        "bindings/c/accord.pc.in",
        "bindings/c/cmake/accordConfig.cmake.in",
        "bindings/c/cmake/accordConfigVersion.cmake.in",
    ):
        text = (ROOT / rel).read_text()
        if "@VERSION@" not in text:
            problems.append(f"{rel} does not take its version from the build (@VERSION@)")
        for spelled in re.findall(r"\b\d+\.\d+\.\d+\b", text):
            problems.append(f"{rel} spells a version, {spelled}: use @VERSION@")

    # The install lines users copy: the tarball's name and the Go module's tag.
    readme = (ROOT / "README.md").read_text()
    for pattern, what in (
        (r"libaccord-(\d+\.\d+\.\d+[0-9A-Za-z.+-]*?)-[a-z]", "libaccord tarball"),
        (r"bindings/go@v(\d+\.\d+\.\d+[0-9A-Za-z.+-]*)", "go get"),
    ):
        for got in sorted(set(re.findall(pattern, readme))):
            check(f"the version in README.md's {what} line", got)
    for got in sorted(set(re.findall(r'accord-coord(?:-cli)? = "(\d[^"]*)"', readme))):
        # A Cargo requirement: "0.1" or "0.1.0" both ask for this release.
        if got != want and not want.startswith(got + "."):
            problems.append(f"README.md's Cargo dependency asks for {got!r}, not {want!r}")

    # The C example's find_package(accord X.Y): a release of another minor would not satisfy it.
    cmake = (ROOT / "examples/c/CMakeLists.txt").read_text()
    for got in re.findall(r"find_package\(accord (\d+\.\d+)", cmake):
        if not want.startswith(got + "."):
            problems.append(f"examples/c/CMakeLists.txt asks for accord {got}, not {want}")

    changelog = ROOT / "CHANGELOG.md"
    if not changelog.exists() or f"## [{want}]" not in changelog.read_text():
        problems.append(f"CHANGELOG.md has no '## [{want}]' section")

    for p in problems:
        print(f"check-versions: {p}", file=sys.stderr)
    if problems:
        print(
            f"check-versions: {len(problems)} problem(s); the workspace version is {want} (Cargo.toml)",
            file=sys.stderr,
        )
        return 1
    print(f"check-versions: every package is {want}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
