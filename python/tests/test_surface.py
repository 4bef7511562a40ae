"""The package's surface as Python shows it: the names ``dir(accord)`` offers, and the repr of
every public class (records: ``Name(field=value, ...)``, as a dataclass's; handles on something
live: ``<accord.Name ...>``, as a file's or a socket's)."""

from __future__ import annotations

import re

from support import AsyncClients, Clients, Scenario

import accord

# Records: values that compare equal by their fields; their repr is the fields.
RECORDS = {
    "Assigned",
    "Histogram",
    "Joined",
    "Leader",
    "LeaseInfo",
    "Left",
    "ListPage",
    "MemberInfo",
    "Members",
    "Message",
    "PoolCounts",
    "Reconnected",
    "Revoked",
    "Stats",
    "StreamEvent",
    "StreamInfo",
    "Updated",
}


def public_classes() -> set[str]:
    """Every class ``__all__`` exports but the exceptions (whose repr is Python's own)."""
    return {
        name
        for name in accord.__all__
        if isinstance(getattr(accord, name), type)
        and not issubclass(getattr(accord, name), BaseException)
    }


def test_dir_holds_only_public_names() -> None:
    """``dir(accord)`` is ``__all__`` and private ``_`` names: no ``Union`` or ``annotations``
    borrowed from the imports (what completion and ``help()`` show a newcomer)."""
    public = {name for name in dir(accord) if not name.startswith("_")}
    assert public == {name for name in accord.__all__ if not name.startswith("_")}
    assert set(accord.__all__) <= set(dir(accord))
    assert public_classes() >= RECORDS


async def test_every_public_class_has_an_informative_repr(
    sc: Scenario, clients: Clients, aclients: AsyncClients
) -> None:
    c = clients("sync")
    seen: dict[str, object] = {}

    def see(obj: object) -> None:
        seen[type(obj).__name__] = obj

    lease = c.acquire("k", metadata={"k": "v"})
    see(c)
    see(lease)
    see(lease.lost)
    page = c.list()
    see(page)
    see(page[0])
    c.offer("p/", ["p/1"])
    see(c.counts("p/"))
    see(c.semaphore("gpu", 2))
    election = c.election("e")
    see(election)
    leadership = election.campaign("host-a", timeout=10)
    see(leadership)
    see(election.leader())
    observer = election.observe()
    see(observer)
    watch = c.watch("g")
    see(watch)
    see(watch.next(timeout=10))  # Members
    member = c.join("g", metadata={"zone": "a"})
    see(member)
    see(watch.next(timeout=10))  # Joined
    see(c.members("g")[0])
    member.update_metadata({"zone": "b"})
    see(watch.next(timeout=10))  # Updated
    member.leave()
    see(watch.next(timeout=10))  # Left
    fleet = c.fleet("f", 1, ttl=5, period=0.1)
    see(fleet)
    assigned = fleet.next_event(timeout=20)
    see(assigned)
    assert isinstance(assigned, accord.Assigned)
    see(assigned.lease)
    fleet.close()
    see(fleet.next_event(timeout=20))  # Revoked
    sub = c.listen(sc.channel("ch"))
    see(sub)
    c.notify(sc.channel("ch"), "hello")
    see(sub.recv(timeout=10))  # Message
    see(accord.Reconnected())
    stats = c.stats()
    see(stats)
    see(stats.acquire_wait)
    c.publish("st", "x")
    stream = c.subscribe("st", after="earliest")
    see(stream)
    see(stream.next(timeout=10))
    see(c.stream_info("st"))

    a = await aclients("async")
    see(a)
    opening = a.acquire("ak")
    see(opening)
    see(await opening)
    see(await a.semaphore("agpu", 2))
    aelection = a.election("ae")
    see(aelection)
    see(await aelection.campaign("host-b", timeout=10))
    see(await aelection.observe())
    see(await a.join("ag"))
    see(await a.watch("ag"))
    see(await a.fleet("af", 1, ttl=5, period=0.1))
    see(await a.listen(sc.channel("ach")))
    see(await a.subscribe("ast"))

    assert set(seen) == public_classes(), "a public class this test does not show"
    for name, obj in seen.items():
        text = repr(obj)
        if name in RECORDS:
            assert re.fullmatch(rf"{name}\(.*\)", text, re.DOTALL), text
        else:
            assert re.fullmatch(rf"<accord\.{name}( [^<>]*)?>", text), text

    # The records show their fields as Python would, nested records included.
    assert repr(seen["Members"]) == "Members([])"
    info = seen["MemberInfo"]
    assert isinstance(info, accord.MemberInfo)
    assert repr(info) == f"MemberInfo(owner='sync', fence={info.fence}, metadata={{'zone': 'a'}})"
    assert repr(seen["Updated"]) == f"Updated(MemberInfo(owner='sync', fence={info.fence}, " + (
        "metadata={'zone': 'b'}))"
    )
    assert repr(page) == f"ListPage(items=[{page[0]!r}], next_cursor=None)"
    assert repr(c.counts("p/")) == "PoolCounts(free=1, held=0, done=0)"
    # The handles name what they hold.
    assert repr(lease) == f"<accord.Lease key='k' fence={lease.fence} owner='sync'>"
    assert repr(c) == f"<accord.Client namespace={c.namespace!r} owner='sync'>"
