"""A Python worker of the polyglot grant audit: try_acquire + immediate release of one key
until it was granted GRANTS times; prints ``HAMMER <grants>``.

    python hammer.py URL NAMESPACE KEY GRANTS
"""

from __future__ import annotations

import os
import sys

import accord


def main() -> None:
    url, namespace, key, grants = (
        sys.argv[1],
        sys.argv[2],
        sys.argv[3],
        int(sys.argv[4]),
    )
    owner = f"python-{os.getpid()}"
    granted = 0
    with accord.Client.connect(url, namespace=namespace, owner=owner, ttl=30) as client:
        while granted < grants:
            lease = client.try_acquire(key)
            if lease is None:
                continue
            granted += 1
            lease.release()
    print(f"HAMMER {granted}", flush=True)


if __name__ == "__main__":
    main()
