"""A listener: prints notifications on the given channels until Ctrl-C (or COUNT of them).

    ACCORD_URL=postgres://app:secret@localhost/app python examples/listener.py jobs alerts
    psql -c "NOTIFY jobs, 'hello'"      # from anywhere: SQL, triggers, any accord client

After a ``Reconnected`` event, notifications sent while the connection was down were missed:
re-read whatever state they were about (here: the keys that are done).
"""

from __future__ import annotations

import os
import sys

import accord


def main() -> None:
    url = os.environ.get("ACCORD_URL", "postgres://localhost/postgres")
    namespace = os.environ.get("ACCORD_NAMESPACE", "default")
    count = int(os.environ.get("COUNT", "0"))  # 0: until Ctrl-C
    channels = sys.argv[1:] or ["jobs"]
    with (
        accord.Client.connect(url, namespace=namespace) as client,
        client.listen(*channels) as subscription,
    ):
        print(f"listening on {', '.join(channels)}", flush=True)
        received = 0
        try:
            for event in subscription:
                if isinstance(event, accord.Reconnected):
                    done = client.list(state="done", limit=1000)
                    print(f"reconnected: {len(done)} keys are done", flush=True)
                    continue
                print(f"{event.channel}: {event.payload}", flush=True)
                received += 1
                if received == count:
                    break
        except KeyboardInterrupt:
            print("bye")


if __name__ == "__main__":
    main()
