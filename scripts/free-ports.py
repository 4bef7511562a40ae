#!/usr/bin/env python3
"""Prints N distinct free TCP ports on 127.0.0.1, space-separated, for the test servers.

The ports come from below the kernel's ephemeral range (net.ipv4.ip_local_port_range), never
from bind(port 0), which hands out ephemeral ports: a test kills a server (kill -9) and starts
it again on the same port, and while it is down any outgoing connection on the machine (its
peers reconnecting, the test's own clients) may be given that port as its local end. The
restarted server then fails with "address already in use". Below the range, only an explicit
bind takes a port, so a port stays ours from the moment its server first binds it.
"""

import random
import socket
import sys


def ephemeral_low() -> int:
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range", encoding="ascii") as f:
            return int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768  # Linux's default low end


def main() -> None:
    count = int(sys.argv[1]) if len(sys.argv) > 1 else 1
    high = ephemeral_low()
    low = max(1024, high - 12000)
    if high - low < 4 * count:
        sys.exit(f"free-ports: too few ports below the ephemeral range (it starts at {high})")
    # A random start spreads concurrent runs (two checkouts testing at once) apart; the sockets
    # stay bound until every port is chosen, so no port is printed twice.
    span = high - low
    start = random.randrange(span)
    held = []
    for step in range(span):
        port = low + (start + step) % span
        s = socket.socket()
        try:
            # No SO_REUSEADDR: a port with connections lingering in TIME_WAIT is skipped too.
            s.bind(("127.0.0.1", port))
        except OSError:
            s.close()
            continue
        held.append(s)
        if len(held) == count:
            break
    if len(held) < count:
        sys.exit(f"free-ports: found {len(held)} free ports of {count} below {high}")
    print(" ".join(str(s.getsockname()[1]) for s in held))


if __name__ == "__main__":
    main()
