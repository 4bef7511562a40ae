#!/usr/bin/env python3
"""Writes a Go module as a GOPROXY directory (the layout `GOPROXY=file://DIR` and a static web
server serve): DIR/<module>/@v/{list, vX.Y.Z.info, vX.Y.Z.mod, vX.Y.Z.zip}.

    scripts/goproxy.py MODULE VERSION SRC_DIR OUT_DIR

SRC_DIR holds the module's files as a release tag's tree would (go.mod at its root). The zip
has them under `<module>@<version>/`, as proxy.golang.org builds it from a tag, in sorted order
with fixed timestamps, so the same files give the same zip (and the same go.sum hash). Made for
mk/dist.mk's `dist-go`; `go` itself checks the result when a test `go get`s it.
"""

import datetime
import json
import os
import sys
import zipfile

# Go refuses module zips above 500 MiB uncompressed (golang.org/x/mod/zip); say so here first.
MAX_UNCOMPRESSED = 500 << 20


def main() -> int:
    if len(sys.argv) != 5:
        print(__doc__, file=sys.stderr)
        return 2
    module, version, src, out = sys.argv[1:]
    if not version.startswith("v"):
        print(
            f"goproxy.py: version {version!r} must start with v (a Go module version)",
            file=sys.stderr,
        )
        return 2
    go_mod = os.path.join(src, "go.mod")
    with open(go_mod, "rb") as f:
        mod_text = f.read()
    first = mod_text.decode().splitlines()[0].split()
    if first[:1] != ["module"] or first[1:2] != [module]:
        print(
            f"goproxy.py: {go_mod} declares {' '.join(first)!r}, not module {module}",
            file=sys.stderr,
        )
        return 1

    files = []
    for root, dirs, names in os.walk(src):
        # A folder with a go.mod of its own is another module (e.g. fencedtest, the fenced-write
        # tests with their drivers): Go leaves it out of this module's zip, and refuses a zip
        # that holds one.
        dirs[:] = sorted(d for d in dirs if not os.path.exists(os.path.join(root, d, "go.mod")))
        for name in sorted(names):
            path = os.path.join(root, name)
            rel = os.path.relpath(path, src).replace(os.sep, "/")
            if os.path.islink(path):
                print(
                    f"goproxy.py: {rel} is a symlink; module zips cannot hold one", file=sys.stderr
                )
                return 1
            files.append((rel, path))
    total = sum(os.path.getsize(p) for _, p in files)
    if total > MAX_UNCOMPRESSED:
        print(
            f"goproxy.py: {total} bytes of files; Go refuses module zips above {MAX_UNCOMPRESSED}",
            file=sys.stderr,
        )
        return 1

    at_v = os.path.join(out, module, "@v")
    os.makedirs(at_v, exist_ok=True)
    # The commit's time when the caller knows it (SOURCE_DATE_EPOCH), else now: `go list -m`
    # shows it, nothing checks it.
    epoch = int(os.environ.get("SOURCE_DATE_EPOCH", datetime.datetime.now().timestamp()))
    when = datetime.datetime.fromtimestamp(epoch, datetime.UTC)
    stamp = (1980, 1, 1, 0, 0, 0)  # the earliest a zip can record: fixed, for identical zips
    with zipfile.ZipFile(os.path.join(at_v, f"{version}.zip"), "w", zipfile.ZIP_DEFLATED) as z:
        for rel, path in files:
            info = zipfile.ZipInfo(f"{module}@{version}/{rel}", date_time=stamp)
            info.compress_type = zipfile.ZIP_DEFLATED
            info.external_attr = 0o644 << 16
            with open(path, "rb") as f:
                z.writestr(info, f.read())
    with open(os.path.join(at_v, f"{version}.mod"), "wb") as f:
        f.write(mod_text)
    with open(os.path.join(at_v, f"{version}.info"), "w") as f:
        json.dump({"Version": version, "Time": when.strftime("%Y-%m-%dT%H:%M:%SZ")}, f)
    versions = set()
    list_path = os.path.join(at_v, "list")
    if os.path.exists(list_path):
        with open(list_path) as f:
            versions = {line.strip() for line in f if line.strip()}
    versions.add(version)
    with open(list_path, "w") as f:
        f.write("".join(v + "\n" for v in sorted(versions)))
    print(f"{os.path.join(at_v, version)}.zip: {len(files)} files, {total} bytes uncompressed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
