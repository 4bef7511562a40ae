#!/usr/bin/env python3
"""Runs the Rust crates' test binaries in two lanes side by side, then the ones that must wait.

    scripts/rust-test-lanes.py --beside etcd,cli --after server_restart -- CARGO_ARGS…

`cargo test` runs one test binary after another, and holds the build folder's lock while they
run, so a second `cargo test` waits for the first. The etcd store's tests spend most of their
time waiting (member kills, elections, lease ttls), as do the PostgreSQL ones; on a 2-core
machine the two run side by side in about the time of the longer one.

So this builds every test target once (`cargo test --no-run`), starts the test binaries named by
--beside directly (cargo's way: from their package's folder), one after another in the order
given, in the background, and meanwhile runs every other test target through `cargo test`,
except those named by --after. Those run last, alone: they stop the shared PostgreSQL server,
which no test of another binary may see.

The background lane's output is printed when it ends, under a heading. The exit status is
non-zero when any lane failed.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
import tempfile
from pathlib import Path


def build(cargo: str, cargo_args: list[str]) -> list[dict[str, str]]:
    """Builds every test target; returns each test binary's name, executable and package folder."""
    command = [cargo, "test", *cargo_args, "--all-targets", "--no-run", "--message-format=json"]
    done = subprocess.run(command, stdout=subprocess.PIPE, text=True, check=False)
    if done.returncode != 0:
        sys.exit(done.returncode)
    binaries = []
    for line in done.stdout.splitlines():
        message = json.loads(line)
        if message.get("reason") != "compiler-artifact" or not message.get("executable"):
            continue
        target = message["target"]
        if "test" in target["kind"]:
            binaries.append(
                {
                    "name": target["name"],
                    "executable": message["executable"],
                    "folder": str(Path(message["manifest_path"]).parent),
                }
            )
    return binaries


def start_beside(binaries: list[dict[str, str]], log: Path) -> subprocess.Popen[bytes]:
    """Runs the binaries one after another in the background, their output into `log`."""
    script = "status=0\n"
    for b in binaries:
        name, folder, executable = (shlex.quote(b[k]) for k in ("name", "folder", "executable"))
        script += (
            f"echo; echo '     Running '{name}' (beside the other tests)'\n"
            f"(cd {folder} && CARGO_MANIFEST_DIR={folder} {executable}) || status=1\n"
        )
    script += "exit $status\n"
    with log.open("wb") as out:
        return subprocess.Popen(["sh", "-c", script], stdout=out, stderr=subprocess.STDOUT)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--beside", required=True, help="test targets run in the background")
    parser.add_argument("--after", default="", help="test targets run when both lanes ended")
    parser.add_argument("cargo_args", nargs=argparse.REMAINDER)
    args = parser.parse_args()
    cargo = os.environ.get("CARGO", "cargo")
    cargo_args = [a for a in args.cargo_args if a != "--"]
    # In the order given: the CLI's tests use the etcd cluster, so they come after the etcd
    # store's member kills, in the same lane.
    order = [n for n in args.beside.split(",") if n]
    beside = set(order)
    after = set(filter(None, args.after.split(",")))

    binaries = build(cargo, cargo_args)
    names = {b["name"] for b in binaries}
    unknown = (beside | after) - names
    if unknown:
        sys.exit(f"rust-test-lanes: no test target named {', '.join(sorted(unknown))}")
    in_background = sorted(
        (b for b in binaries if b["name"] in beside), key=lambda b: order.index(b["name"])
    )
    rest = sorted(names - beside - after)

    with tempfile.TemporaryDirectory(prefix="accord-lanes.") as folder:
        log = Path(folder) / "beside.log"
        background = start_beside(in_background, log)
        # Every other target: the libraries', binaries' and examples' unit tests, and the test
        # files not named above.
        foreground = [cargo, "test", *cargo_args, "--lib", "--bins", "--examples"]
        for name in rest:
            foreground += ["--test", name]
        failed = subprocess.run(foreground, check=False).returncode != 0
        failed |= background.wait() != 0
        sys.stdout.write(f"\n==== the tests run beside ({', '.join(order)}) ====\n")
        sys.stdout.write(log.read_text(errors="replace"))
        sys.stdout.flush()
    if after:
        command = [cargo, "test", *cargo_args]
        for name in sorted(after):
            command += ["--test", name]
        failed |= subprocess.run(command, check=False).returncode != 0
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
