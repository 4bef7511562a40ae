"""Quick start (sync API): a lease as a lock, its fence, done, and a notification.

ACCORD_URL=postgres://app:secret@localhost/app python examples/quickstart.py

It resets the key it marks done at the end, so that it runs again and again, before or after
the other languages' quick starts (the same namespace and key).
"""

from __future__ import annotations

import os

import accord


def main() -> None:
    url = os.environ.get("ACCORD_URL", "postgres://localhost/postgres")
    namespace = os.environ.get("ACCORD_NAMESPACE", "reports")
    with accord.Client.connect(url, namespace=namespace, ttl=10) as client:
        # Wait up to 5 s for the key; the lease renews itself in the background and is
        # released at the end of the block.
        try:
            with client.acquire("daily/2026-11-22", timeout=5) as lease:
                print(f"holding {lease.key} with fence {lease.fence} until {lease.expires_at}")
                # ... write the report, passing lease.fence to the storage that checks it ...
                if lease.lost:
                    raise SystemExit("lost the lease: stop writing")
                lease.done({"rows": 42})  # never granted again until client.reset(key)
        except accord.Done:
            print("already done:", [(i.key, i.metadata) for i in client.list(state="done")])

        # Notifications, from any client or from SQL (NOTIFY jobs, 'hi').
        with client.listen("jobs") as subscription:
            client.notify("jobs", "report ready")
            event = subscription.recv(timeout=5)
            if isinstance(event, accord.Message):
                print(f"{event.channel}: {event.payload}")

        # Done is final until reset: reset makes the key acquirable again, so that this runs
        # again. (An earlier run stopped before this line left it done: see accord.Done above.)
        client.reset("daily/2026-11-22")


if __name__ == "__main__":
    main()
