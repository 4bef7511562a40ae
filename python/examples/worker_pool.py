"""A pool of worker processes sharing a folder of files: each file is processed exactly once,
and a file whose worker died is picked up by another once its lease expires.

    ACCORD_URL=postgres://app:secret@localhost/app python examples/worker_pool.py [FOLDER]

Without FOLDER, a temporary folder of sample files is made. Each file is a key
``file/<name>`` of the work pool ``file/``: the main process ``offer``s them all once, each
worker ``claim``s a batch of free ones (no worker walks the names: the coordinator hands each
free key to one claimer), counts its words, and marks each ``done`` with the count as
metadata. Run it again: the offer adds nothing, every file is done, nothing is redone.
"""

from __future__ import annotations

import multiprocessing
import os
import sys
import tempfile
from pathlib import Path

import accord

TTL = 10.0  # a crashed worker's file is picked up again after at most this long
POOL = "file/"
BATCH = 5  # files claimed at once: one statement per batch


def work(url: str, namespace: str, folder: str) -> int:
    """One worker: claims free files until none is left; returns how many it processed."""
    processed = 0
    with accord.Client.connect(url, namespace=namespace, ttl=TTL) as client:
        while leases := client.claim(POOL, limit=BATCH, metadata={"worker": os.getpid()}):
            for lease in leases:
                with lease:
                    words = len(Path(folder, lease.key[len(POOL) :]).read_text().split())
                    if lease.lost:
                        continue  # too slow: someone else may be processing it now
                    lease.done({"words": words})
                    processed += 1
    return processed


def main() -> None:
    url = os.environ.get("ACCORD_URL", "postgres://localhost/postgres")
    namespace = os.environ.get("ACCORD_NAMESPACE", "worker-pool")
    if len(sys.argv) > 1:
        folder = sys.argv[1]
    else:
        folder = tempfile.mkdtemp(prefix="accord-files-")
        for i in range(40):
            Path(folder, f"part-{i:03}.txt").write_text("lorem ipsum dolor " * (i + 1))
    with accord.Client.connect(url, namespace=namespace) as client:
        offered = client.offer(POOL, [POOL + p.name for p in sorted(Path(folder).iterdir())])
    print(f"offered {offered} new files")
    # spawn: each worker process starts fresh and makes its own client (a client cannot
    # cross fork(); see the README).
    with multiprocessing.get_context("spawn").Pool(4) as pool:
        counts = pool.starmap(work, [(url, namespace, folder)] * 4)
    print(f"processed by the workers: {counts} (sum {sum(counts)})")

    with accord.Client.connect(url, namespace=namespace) as client:
        done = []
        cursor = None
        while True:
            page = client.list(POOL, state="done", limit=1000, cursor=cursor)
            done += list(page)
            if (cursor := page.next_cursor) is None:
                break
        total = sum(int(info.metadata.get("words", 0)) for info in done)
        print(f"{len(done)} files done, {total} words")
        left = client.counts(POOL)
        print(f"pool {POOL}: {left.free} free, {left.held} held, {left.done} done")


if __name__ == "__main__":
    main()
