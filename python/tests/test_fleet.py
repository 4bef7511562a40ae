"""Membership and fleets (docs/semantics.md, scenarios M1, F1-F4) through the sync API: join,
members and watch with a member leaving; two fleet members splitting 8 shards; a newcomer
getting a shard by hand-off (the holder's Revoked, acknowledged by asking for the next event,
before the Assigned elsewhere); close handing everything back; bad input."""

from __future__ import annotations

import time
from typing import Any, Optional

import pytest
from support import Clients, Database

import accord
from accord import Assigned, Fleet, FleetEvent, Joined, Left, Members, Revoked, Updated

TTL = 1.5
PERIOD = 0.25
SHARDS = 8
#: Bounds a wait, never a speed.
PATIENCE = 20.0


def open_fleet(clients: Clients, owner: str, name: str = "f", **options: Any) -> Fleet:
    merged: dict[str, Any] = {"ttl": TTL, "period": PERIOD, **options}
    return clients(owner, ttl=TTL).fleet(name, SHARDS, **merged)


def next_or_none(fleet: Fleet, timeout: float) -> Optional[FleetEvent]:
    """The fleet's next event, or None if none came within `timeout` seconds."""
    try:
        return fleet.next_event(timeout=timeout)
    except accord.Timeout:
        return None


def balance(*fleets: Fleet, each: int) -> list[tuple[int, FleetEvent]]:
    """Reads the fleets' events in turn (each read acknowledging the one before) until every
    fleet holds `each` shards and nothing more comes; the events, tagged by fleet."""
    seen: list[tuple[int, FleetEvent]] = []
    deadline = time.monotonic() + PATIENCE
    quiet = 0
    while time.monotonic() < deadline:
        got = False
        for i, fleet in enumerate(fleets):
            event = next_or_none(fleet, 0.05)
            if event is not None:
                seen.append((i, event))
                got = True
        settled = all(len(f.shards()) == each for f in fleets)
        quiet = 0 if got or not settled else quiet + 1
        if quiet >= 4:
            return seen
    raise AssertionError(f"not balanced: {[f.shards() for f in fleets]}")


def test_join_members_and_watch_with_a_member_leaving(clients: Clients) -> None:
    a, b = clients("a"), clients("b")
    with b.watch("workers") as watch:
        first = watch.next(timeout=5)  # the first event: the members now
        assert isinstance(first, Members) and first.members == []
        member = a.join("workers", metadata={"role": "x"}, ttl=TTL)
        assert (member.group, member.owner, member.status) == ("workers", "a", "held")
        assert member.key == "accord.group/workers/a" and member.fence > 0
        assert not member.is_lost and not member.lost and member.lost_reason is None
        joined = watch.next(timeout=5)
        assert isinstance(joined, Joined)
        assert (joined.member.owner, joined.member.metadata) == ("a", {"role": "x"})
        assert joined.member.fence == member.fence
        assert joined.member.since.tzinfo is not None and joined.member.expires_at is not None

        with b.join("workers") as other:
            event = watch.next(timeout=5)
            assert isinstance(event, Joined) and event.member.owner == "b"
            member.update_metadata({"role": "y"})
            infos = a.members("workers")
            assert [(m.owner, m.metadata) for m in infos] == [("a", {"role": "y"}), ("b", {})]
            # Watchers see the update: the member as it is now, with its fence (no rejoin).
            updated = watch.next(timeout=5)
            assert isinstance(updated, Updated)
            assert (updated.member.owner, updated.member.fence) == ("a", member.fence)
            assert updated.member.metadata == {"role": "y"}
            member.leave()
            left = watch.next(timeout=5)
            assert isinstance(left, Left)
            assert (left.member.owner, left.member.fence) == ("a", member.fence)
            assert member.status == "released"
            member.leave()  # again: harmless
            with pytest.raises(accord.LeaseLost):
                member.update_metadata({"role": "z"})
            assert [m.owner for m in b.members("workers")] == ["b"]
            assert other.status == "held"
        # Leaving at the end of the block.
        event = watch.next(timeout=5)
        assert isinstance(event, Left) and event.member.owner == "b"
        assert b.members("workers") == []

        # A new watch starts with the members now; a member whose client closes without a
        # word is found gone at its expiry.
        c = clients("c")
        kept = c.join("workers", ttl=TTL)  # noqa: F841 (held until its client closes)
        with a.watch("workers") as again:
            first = again.next(timeout=5)
            assert isinstance(first, Members) and [m.owner for m in first.members] == ["c"]
            c.close()
            event = again.next(timeout=5)
            assert isinstance(event, Left) and event.member.owner == "c"
            with pytest.raises(accord.Timeout):
                again.next(timeout=0.1)
    assert watch.closed
    assert list(watch) == []  # iteration ends once closed
    with pytest.raises(accord.Closed):
        watch.next()


def test_watch_reads_with_a_tiny_timeout_lose_no_change(clients: Clients) -> None:
    """M2: a read that times out half-way (after taking the announcement) loses nothing: the
    change comes at the next read, well before the 30 s safety re-read."""
    a, b = clients("a"), clients("b")

    def poll(watch: accord.MemberWatch) -> Any:
        started = time.monotonic()
        while True:
            try:
                return watch.next(timeout=0.001)
            except accord.Timeout:
                assert time.monotonic() - started < 10, "a timed-out read lost the change"

    with b.watch("workers") as watch:
        first = poll(watch)
        assert isinstance(first, Members) and first.members == []
        for _ in range(3):
            member = a.join("workers", ttl=60)
            joined = poll(watch)
            assert isinstance(joined, Joined) and joined.member.fence == member.fence
            member.leave()
            left = poll(watch)
            assert isinstance(left, Left) and left.member.fence == member.fence


def test_two_members_split_8_shards(clients: Clients) -> None:
    with open_fleet(clients, "m1") as f1:
        assert (f1.name, f1.closed) == ("f", False)
        first = [f1.next_event(timeout=PATIENCE) for _ in range(SHARDS)]
        assert all(isinstance(e, Assigned) for e in first)
        assert sorted(e.shard for e in first if isinstance(e, Assigned)) == sorted(
            str(i) for i in range(SHARDS)
        )
        assert f1.shards() == sorted(str(i) for i in range(SHARDS))
        lease = first[0].lease if isinstance(first[0], Assigned) else None
        assert lease is not None and lease.fence > 0 and lease.status == "held"
        assert lease.key == f"accord.fleet/f/s/{lease.shard}" and not lease.lost

        with open_fleet(clients, "m2") as f2:
            seen = balance(f1, f2, each=SHARDS // 2)
            assert sorted(f1.shards() + f2.shards()) == sorted(str(i) for i in range(SHARDS))
            revoked = [e for i, e in seen if i == 0 and isinstance(e, Revoked)]
            assigned = [e for i, e in seen if i == 1 and isinstance(e, Assigned)]
            assert {e.reason for e in revoked} == {"handoff"}
            assert sorted(e.shard for e in revoked) == sorted(e.shard for e in assigned)
            assert sorted(e.shard for e in assigned) == f2.shards()
            assert [m.owner for m in f1.members()] == ["m1", "m2"]
        # f2 closed: its shards come back to f1.
        balance(f1, each=SHARDS)


def test_a_newcomer_gets_a_shard_by_handoff(clients: Clients, admin: Database) -> None:
    # The holder releases a shard asked for only once its user asks for the next event (the
    # hand-off timeout is far away): the Revoked comes before the Assigned elsewhere.
    f1 = open_fleet(clients, "m1", handoff_timeout=30)
    held = {}
    for _ in range(SHARDS):
        event = f1.next_event(timeout=PATIENCE)
        assert isinstance(event, Assigned)
        held[event.shard] = event.lease.fence
    f2 = open_fleet(clients, "m2")
    revoked = f1.next_event(timeout=PATIENCE)
    assert isinstance(revoked, Revoked) and revoked.reason == "handoff"
    assert revoked.fence == held[revoked.shard]
    # Not acknowledged yet: still f1's, and f2 gets nothing.
    assert next_or_none(f2, 4 * PERIOD) is None
    namespace = clients.sc.namespace
    key = f"accord.fleet/f/s/{revoked.shard}"
    assert admin.holder(namespace, key) == "m1"
    # Asking for the next event acknowledges it: released, and assigned to f2 at once.
    started = time.monotonic()
    f1.next_event(timeout=PATIENCE)
    assigned = f2.next_event(timeout=PATIENCE)
    assert isinstance(assigned, Assigned) and assigned.shard == revoked.shard
    assert assigned.lease.fence > revoked.fence
    assert time.monotonic() - started < TTL
    assert admin.holder(namespace, key) == "m2"
    f1.close()
    f2.close()


def test_close_hands_everything_back(clients: Clients) -> None:
    f1 = open_fleet(clients, "m1")
    with open_fleet(clients, "m2") as f2:
        balance(f1, f2, each=SHARDS // 2)
        mine = f1.shards()
        f1.close()
        assert f1.closed and f1.shards() == []
        # Every shard it held yields Revoked(closed), then the events end.
        rest = list(f1)
        assert sorted(e.shard for e in rest if isinstance(e, Revoked)) == mine
        assert {e.reason for e in rest if isinstance(e, Revoked)} == {"closed"}
        assert f1.next_event() is None
        f1.close()  # again: harmless
        balance(f2, each=SHARDS)
        assert [m.owner for m in f2.members()] == ["m2"]
    assert f2.closed and f2.shards() == []


BAD_FLEET_OPTIONS: list[tuple[dict[str, Any], str]] = [
    ({"shards": 0}, "shards"),
    ({"shards": -1}, "shards"),
    ({"shards": accord.MAX_SHARDS + 1}, "shards"),
    ({}, "shards"),
    ({"shards": 2, "keys": ["a"]}, "shards"),
    ({"keys": []}, "keys"),
    ({"keys": ["a", "b", "a"]}, "keys"),
    ({"keys": ["a", ""]}, "keys"),
    ({"shards": 2, "ttl": 0.01}, "ttl"),
    ({"shards": 2, "ttl": 100_000}, "ttl"),
    ({"shards": 2, "ttl": -1}, "ttl"),
    ({"shards": 2, "ttl": 1, "period": 2}, "period"),
    ({"shards": 2, "period": 0.001}, "period"),
    ({"shards": 2, "max_handoffs_per_period": 0}, "max_handoffs_per_period"),
    ({"shards": 2, "max_handoffs_per_period": -3}, "max_handoffs_per_period"),
    ({"shards": 2, "handoff_timeout": 0}, "handoff_timeout"),
    ({"shards": 2, "metadata": {"x": float("nan")}}, "metadata"),
]


def test_bad_fleet_input_names_the_field(clients: Clients) -> None:
    client = clients("bad")
    for options, field in BAD_FLEET_OPTIONS:
        with pytest.raises(accord.InvalidArgument, match=f"invalid {field}"):
            client.fleet("f", **options)
    assert client.held_count() == 0
    assert client.list().items == []


def test_bad_membership_input_names_the_field(clients: Clients) -> None:
    client = clients("bad")
    with pytest.raises(accord.InvalidArgument, match="invalid ttl"):
        client.join("g", ttl=0.01)
    with pytest.raises(accord.InvalidArgument, match="invalid group"):
        client.join("")
    with pytest.raises(accord.InvalidArgument, match="invalid group"):
        client.members("")
    with pytest.raises(accord.InvalidArgument, match="invalid group"):
        client.watch("a\0b")
    with pytest.raises(TypeError):
        client.fleet("f", keys="ab")
    with pytest.raises(TypeError):
        client.join("g", metadata=["not", "a", "dict"])  # type: ignore[arg-type]
    member = client.join("g")
    with pytest.raises(TypeError):
        member.update_metadata(3)  # type: ignore[arg-type]
    member.leave()
