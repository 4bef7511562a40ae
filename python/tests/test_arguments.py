"""Bad arguments get clear exceptions (TypeError for a wrong type, InvalidArgument — also a
ValueError — naming the field for a bad value) and leave nothing held; the exception classes
map the core's error kinds."""

from __future__ import annotations

import pickle
import re
from collections.abc import Callable
from typing import Any

import pytest
from support import AsyncClients, Clients, Scenario

import accord

KINDS = {
    accord.InvalidArgument: "ACCORD_INVALID_ARGUMENT",
    accord.Held: "ACCORD_HELD",
    accord.Done: "ACCORD_DONE",
    accord.Timeout: "ACCORD_TIMEOUT",
    accord.Cancelled: "ACCORD_CANCELLED",
    accord.LeaseLost: "ACCORD_LEASE_LOST",
    accord.Connection: "ACCORD_CONNECTION",
    accord.Database: "ACCORD_DATABASE",
    accord.Closed: "ACCORD_CLOSED",
    accord.Unsupported: "ACCORD_UNSUPPORTED",
    accord.Internal: "ACCORD_INTERNAL",
    accord.Trimmed: "ACCORD_TRIMMED",
}


def test_exception_classes() -> None:
    for cls, code in KINDS.items():
        assert issubclass(cls, accord.AccordError)
        assert cls.code == code
        assert cls.__module__ == "accord"
        e = cls("message")
        assert str(e) == "message"
        again = pickle.loads(pickle.dumps(e))
        assert type(again) is cls and str(again) == "message"
    assert issubclass(accord.Timeout, TimeoutError)
    assert issubclass(accord.InvalidArgument, ValueError)
    assert issubclass(accord.Connection, ConnectionError)
    assert not issubclass(accord.AccordError, ValueError)


def test_every_error_kind_of_the_core_has_its_class() -> None:
    """The core's kinds (``ERROR_CODES``, from ``ErrorKind::ALL``) and the exception classes
    map one to one, and the module raises each kind as its class, Internal included (which no
    call can provoke)."""
    codes = accord.ERROR_CODES
    assert isinstance(codes, tuple)
    assert len(set(codes)) == len(codes)
    assert set(codes) == set(KINDS.values())
    classes = {cls.code: cls for cls in accord.AccordError.__subclasses__()}
    assert set(classes) == set(codes), "one class per kind, and no other"
    for code in codes:
        e = accord._accord._error_for_code(code, f"a {code} error")
        assert type(e) is classes[code], code
        assert str(e) == f"a {code} error"
    with pytest.raises(accord.InvalidArgument, match="invalid code"):
        accord._accord._error_for_code("ACCORD_NOPE", "")


def test_ranges_are_the_cores() -> None:
    """Counts are checked by the core, so the message is the core's in every language."""
    with pytest.raises(accord.InvalidArgument) as e:
        accord.Client.connect("memory:py-ranges", pool_size=accord.MAX_POOL_SIZE + 1)
    assert str(e.value) == f"invalid pool_size: 65 is outside 1..={accord.MAX_POOL_SIZE}"
    with accord.Client.connect("memory:py-ranges") as c:
        with pytest.raises(accord.InvalidArgument) as e:
            c.list(limit=accord.MAX_LIST_LIMIT + 1)
        assert str(e.value) == f"invalid limit: 1001 is outside 1..={accord.MAX_LIST_LIMIT}"
        assert len(c.list(limit=accord.MAX_LIST_LIMIT)) == 0


def test_bad_keys(clients: Clients) -> None:
    c = clients("o1")
    with pytest.raises(TypeError):
        c.try_acquire(123)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        c.acquire(None)  # type: ignore[arg-type]
    for key, why in (("", "empty"), ("a\0b", "NUL"), ("k" * 513, "513 bytes")):
        with pytest.raises(accord.InvalidArgument, match="key") as e:
            c.try_acquire(key)
        assert why in str(e.value)
        assert isinstance(e.value, ValueError)
    with pytest.raises(accord.InvalidArgument, match="key"):
        c.reset("")
    at_the_limit = c.try_acquire("k" * 512)
    assert at_the_limit is not None
    at_the_limit.release()
    assert c.held_count() == 0


def test_recipe_keys_are_refused_naming_the_recipe(clients: Clients) -> None:
    c = clients("o1")
    with pytest.raises(accord.InvalidArgument) as e:
        c.try_acquire("accord.fleet/f/s/0")
    assert str(e.value) == (
        'invalid key: "accord.fleet/f/s/0" is under "accord.fleet/", which is reserved for '
        "fleets; use client.fleet(...)"
    )
    with pytest.raises(accord.InvalidArgument, match=r"reserved for groups; use client\.join"):
        c.reset("accord.group/g/o1")
    with pytest.raises(accord.InvalidArgument, match=r"invalid prefix: .*reserved for elections"):
        c.claim("accord.election/")
    assert c.held_count() == 0


@pytest.mark.parametrize(
    ("ttl", "error"),
    [
        (0.05, accord.InvalidArgument),
        (0, accord.InvalidArgument),
        (-1, accord.InvalidArgument),
        (86401, accord.InvalidArgument),
        (1e300, accord.InvalidArgument),
        (float("nan"), accord.InvalidArgument),
        (float("inf"), accord.InvalidArgument),
        ("10", TypeError),
    ],
)
def test_bad_ttls(clients: Clients, ttl: Any, error: type[Exception]) -> None:
    c = clients("o1")
    with pytest.raises(error, match="ttl"):
        c.try_acquire("k", ttl=ttl)
    with pytest.raises(error, match="ttl"):
        c.acquire("k", ttl=ttl, timeout=1)
    assert c.held_count() == 0


@pytest.mark.parametrize(
    ("ttl", "message"),
    [
        (1e300, "invalid ttl: 1e300 s is outside the allowed range 0.1 s..=86400 s"),
        (86401, "invalid ttl: 86401 s is outside the allowed range 0.1 s..=86400 s"),
        (0.05, "invalid ttl: 0.05 s is outside the allowed range 0.1 s..=86400 s"),
        (-5, "invalid ttl: -5 s is negative"),
        (float("inf"), "invalid ttl: inf s is outside the allowed range 0.1 s..=86400 s"),
    ],
)
def test_bad_ttls_are_reported_as_given(
    sc: Scenario, clients: Clients, ttl: float, message: str
) -> None:
    """The value the caller gave, in seconds: never a clamped one (1e300 was "4294967295s")."""
    c = clients("o1")
    with pytest.raises(accord.InvalidArgument) as e:
        c.try_acquire("k", ttl=ttl)
    assert str(e.value).startswith(message), str(e.value)
    assert "4294967295" not in str(e.value)
    with pytest.raises(accord.InvalidArgument) as e:
        accord.Client.connect(sc.url, ttl=ttl)
    assert str(e.value).startswith(message), str(e.value)


def test_bad_timeouts(clients: Clients) -> None:
    c = clients("o1")
    for timeout in (-0.1, float("nan")):
        with pytest.raises(accord.InvalidArgument, match="timeout"):
            c.acquire("k", timeout=timeout)
    with pytest.raises(TypeError):
        c.acquire("k", timeout="soon")  # type: ignore[arg-type]
    with c.acquire("k", timeout=float("inf")) as lease:  # no limit
        with pytest.raises(accord.Timeout):
            clients("o2").acquire("k", timeout=0)
        assert not lease.wait_lost(timeout=0)
    sub = c.listen("ch")
    with pytest.raises(accord.InvalidArgument, match="timeout"):
        sub.recv(timeout=-1)
    with pytest.raises(accord.Timeout):
        sub.recv(timeout=0)


class NotJson:
    pass


@pytest.mark.parametrize(
    ("metadata", "error", "match"),
    [
        (["a", "list"], TypeError, "dict"),
        ("text", TypeError, "dict"),
        ({1: "int key"}, TypeError, "keys"),
        ({"k": {1, 2}}, TypeError, "set"),
        ({"k": NotJson()}, TypeError, "NotJson"),
        ({"k": b"bytes"}, TypeError, "bytes"),
        ({"k": float("nan")}, accord.InvalidArgument, "metadata"),
        ({"k": 2**70}, accord.InvalidArgument, "64-bit"),
        ({"k": "x" * 70_000}, accord.InvalidArgument, "65536"),
        ({"k": "a\0b"}, accord.InvalidArgument, "NUL"),
    ],
)
def test_bad_metadata(clients: Clients, metadata: Any, error: type[Exception], match: str) -> None:
    c = clients("o1")
    with pytest.raises(error, match=match):
        c.try_acquire("k", metadata=metadata)
    with pytest.raises(error, match=match):
        c.list(metadata=metadata)
    lease = c.acquire("k")
    with pytest.raises(error, match=match):
        lease.renew(metadata)
    with pytest.raises(error, match=match):
        lease.done(metadata)
    lease.release()
    assert c.held_count() == 0


def test_deep_and_cyclic_metadata(clients: Clients) -> None:
    c = clients("o1")
    deep: dict[str, Any] = {}
    node = deep
    for _ in range(100):
        node["d"] = {}
        node = node["d"]
    with pytest.raises(accord.InvalidArgument, match="nested"):
        c.try_acquire("k", metadata=deep)
    cyclic: dict[str, Any] = {}
    cyclic["self"] = [cyclic]
    with pytest.raises(accord.InvalidArgument, match="nested"):
        c.try_acquire("k", metadata=cyclic)
    values = {"n": None, "b": True, "i": -3, "u": 2**63, "f": 1.5, "s": "✓", "l": [1, (2, 3)]}
    with c.acquire("k", metadata={"all": values}) as lease:
        assert lease.metadata == {"all": {**values, "l": [1, [2, 3]]}}


def test_bad_connections(sc: Scenario) -> None:
    for url in ("mysql://localhost/db", "nonsense", ""):
        with pytest.raises(accord.InvalidArgument, match="url"):
            accord.Client.connect(url)
    with pytest.raises(accord.InvalidArgument, match="absolute path"):
        accord.Client.connect("sqlite:relative.db")
    for options, field in (
        ({"namespace": ""}, "namespace"),
        ({"owner": "o\0"}, "owner"),
        ({"ttl": 0.01}, "ttl"),
        ({"pool_size": 0}, "pool_size"),
        ({"pool_size": -1}, "pool_size"),
        ({"pool_size": 65}, "pool_size"),
        ({"connect_timeout": -1}, "connect_timeout"),
    ):
        with pytest.raises(accord.InvalidArgument, match=field):
            accord.Client.connect(sc.url, **options)
    with pytest.raises(TypeError):
        accord.Client.connect(sc.url, namespace=5)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        accord.Client.connect(sc.url, nonsense=True)  # type: ignore[call-arg]
    with pytest.raises(TypeError):
        accord.Client()
    # Nothing listens on port 1: a Connection error, quickly, which is a ConnectionError.
    with pytest.raises(accord.Connection) as e:
        accord.Client.connect("postgres://u:secret-pw@127.0.0.1:1/db", connect_timeout=2)
    assert isinstance(e.value, ConnectionError)
    assert "secret-pw" not in str(e.value)
    # A wrong password: refused, and the password appears nowhere.
    bad = sc.url.replace("://postgres:", "://postgres:wrong-pw-", 1)
    with pytest.raises(accord.AccordError) as e2:
        accord.Client.connect(bad)
    assert "wrong-pw" not in str(e2.value)


def test_bad_notify_and_listen(clients: Clients) -> None:
    c = clients("o1")
    with pytest.raises(accord.InvalidArgument, match="payload"):
        c.notify("ch", "a\0b")
    with pytest.raises(TypeError):
        c.notify("ch", 5)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        c.listen("ch", 5)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        c.listen(["a", "b"])  # type: ignore[arg-type]


async def test_bad_arguments_async(aclients: AsyncClients) -> None:
    c = await aclients("o1")
    with pytest.raises(accord.InvalidArgument, match="key"):
        await c.acquire("")
    with pytest.raises(accord.InvalidArgument, match="ttl"):
        await c.try_acquire("k", ttl=0)
    with pytest.raises(TypeError):
        await c.try_acquire("k", metadata=[1])  # type: ignore[arg-type]
    with pytest.raises(accord.InvalidArgument, match="payload"):
        await c.notify("ch", "x" * 9000)
    with pytest.raises(accord.InvalidArgument, match="url"):
        await accord.AsyncClient.connect("nonsense")
    assert c.held_count() == 0


LONE = "a\ud800b"  # a lone surrogate: a Python str may hold one, no UTF-8 text can


def test_lone_surrogates_are_invalid_arguments_naming_the_field(
    clients: Clients, sc: Scenario
) -> None:
    """Not pyo3's UnicodeEncodeError naming no argument: the core's InvalidArgument, as Node."""
    c = clients("o1")
    for call in (
        lambda: c.try_acquire(LONE),
        lambda: c.acquire(LONE, timeout=0),
        lambda: c.reset(LONE),
    ):
        with pytest.raises(accord.InvalidArgument, match=r"invalid key: holds an unpaired"):
            call()
    with pytest.raises(accord.InvalidArgument, match=r'invalid metadata: metadata\["who"\] holds'):
        c.try_acquire("k", metadata={"who": LONE})
    with pytest.raises(accord.InvalidArgument, match=r"invalid metadata: holds an unpaired"):
        c.try_acquire("k", metadata={LONE: 1})
    with pytest.raises(accord.InvalidArgument, match=r"invalid keys: holds an unpaired"):
        c.offer("p/", ["p/" + LONE])
    with pytest.raises(accord.InvalidArgument, match=r"invalid namespace: holds an unpaired"):
        accord.Client.connect(sc.url, namespace=LONE)
    # A surrogate pair is one character: fine.
    lease = c.try_acquire("k\U0001f600")
    assert lease is not None
    lease.release()
    assert c.held_count() == 0


async def test_lone_surrogates_async(aclients: AsyncClients, sc: Scenario) -> None:
    c = await aclients("o1")
    with pytest.raises(accord.InvalidArgument, match=r"invalid key: holds an unpaired"):
        await c.try_acquire(LONE)
    with pytest.raises(accord.InvalidArgument, match=r"invalid key: holds an unpaired"):
        await c.acquire(LONE, timeout=0)
    with pytest.raises(accord.InvalidArgument, match=r"invalid key: holds an unpaired"):
        await c.reset(LONE)
    with pytest.raises(accord.InvalidArgument, match=r"invalid namespace: holds an unpaired"):
        await accord.AsyncClient.connect(sc.url, namespace=LONE)
    assert c.held_count() == 0


def test_bad_list_state(clients: Clients) -> None:
    c = clients("o1")
    with pytest.raises(accord.InvalidArgument, match=r'invalid state: "busy" is not one of'):
        c.list(state="busy")  # type: ignore[arg-type]
    assert len(c.list(state="all")) == 0


def test_errors_read_in_seconds_and_python_names(clients: Clients) -> None:
    """Issue 32: durations in a message are in seconds, as Python gives them (the period was
    "0ns"), and a wait's time without float noise (not "0.300804233s")."""
    c = clients("o1")
    with pytest.raises(accord.InvalidArgument) as e:
        c.fleet("f", 2, ttl=5, period=0)
    assert str(e.value) == "invalid period: 0 s is outside 0.01 s..=ttl (5 s)"
    with pytest.raises(accord.InvalidArgument) as e:
        c.fleet("f", 2, handoff_timeout=0)
    assert str(e.value) == "invalid handoff_timeout: 0 s is outside (0 s, 86400 s]"
    with pytest.raises(accord.InvalidArgument) as e:
        c.set_stream_retention("s", max_age=0.05)
    assert str(e.value) == "invalid max_age: 0.05 s is shorter than the least, 0.1 s"
    with pytest.raises(accord.InvalidArgument) as e:
        c.fleet("f", 2, period=float("nan"))
    assert str(e.value) == "invalid period: NaN is not a duration"
    held = c.try_acquire("k")
    assert held is not None
    with pytest.raises(accord.Timeout) as t:
        clients("o2").acquire("k", timeout=0.2)
    waited = re.fullmatch(r'timed out after ([\d.]+) s waiting to acquire "k"', str(t.value))
    assert waited is not None, str(t.value)
    assert len(waited[1].lstrip("0.").replace(".", "")) <= 4, str(t.value)
    held.release()


BEYOND = (2**63, -(2**63) - 1, 10**30)  # no int of these fits in 64 bits


def _count_calls(c: accord.Client, url: str, n: int) -> dict[str, list[Callable[[], object]]]:
    """A call for every int argument, by field, each given ``n``."""
    return {
        "limit": [
            lambda: c.semaphore("s", n),
            lambda: c.claim("p/", limit=n),
            lambda: c.claim("p/", n),
            lambda: c.list(limit=n),
        ],
        "after": [lambda: c.subscribe("s", after=n)],
        "page_size": [lambda: c.subscribe("s", page_size=n)],
        "shards": [lambda: c.fleet("f", n)],
        "max_handoffs_per_period": [lambda: c.fleet("f", 2, max_handoffs_per_period=n)],
        "max_len": [lambda: c.set_stream_retention("s", max_len=n)],
        "pool_size": [lambda: accord.Client.connect(url, pool_size=n)],
    }


def test_ints_beyond_64_bits_are_invalid_arguments_naming_the_field(
    clients: Clients, sc: Scenario
) -> None:
    """Not pyo3's OverflowError naming no argument: the core's InvalidArgument, every count
    and seq argument."""
    c = clients("o1")
    for n in BEYOND:
        for field, fields_calls in _count_calls(c, sc.url, n).items():
            for call in fields_calls:
                with pytest.raises(accord.InvalidArgument) as e:
                    call()
                assert str(e.value).startswith(
                    f"invalid {field}: {n} is outside the 64-bit integer range"
                ), str(e.value)
    sub = c.subscribe("s", consumer="reader")
    with pytest.raises(accord.InvalidArgument, match=r"^invalid seq: 9223372036854775808 is"):
        sub.ack(2**63)
    sub.close()
    with pytest.raises(TypeError, match="limit"):
        c.semaphore("s", "3")  # type: ignore[arg-type]
    assert c.held_count() == 0


async def test_ints_beyond_64_bits_async(aclients: AsyncClients) -> None:
    c = await aclients("o1")
    with pytest.raises(accord.InvalidArgument, match=r"^invalid limit: 9223372036854775808 is"):
        await c.semaphore("s", 2**63)
    with pytest.raises(accord.InvalidArgument, match=r"^invalid limit: 9223372036854775808 is"):
        await c.claim("p/", limit=2**63)
    with pytest.raises(accord.InvalidArgument, match=r"^invalid after: 9223372036854775808 is"):
        await c.subscribe("s", after=2**63)


def test_lone_surrogates_in_every_text_argument(clients: Clients, sc: Scenario) -> None:
    """Every str argument, not only keys and namespaces: UnicodeEncodeError named none."""
    c = clients("o1")
    election = c.election("e")
    sub = c.subscribe("s", consumer="reader")
    calls: dict[str, list[Callable[[], object]]] = {
        "name": [
            lambda: c.semaphore(LONE, 1),
            lambda: c.election(LONE),
            lambda: c.fleet(LONE, 2),
        ],
        "prefix": [
            lambda: c.offer(LONE, []),
            lambda: c.claim(LONE),
            lambda: c.counts(LONE),
            lambda: c.list(LONE),
        ],
        "group": [lambda: c.join(LONE), lambda: c.members(LONE), lambda: c.watch(LONE)],
        "channel": [lambda: c.notify(LONE)],
        "channels": [lambda: c.listen("ok", LONE)],
        "payload": [lambda: c.notify("ch", LONE), lambda: c.publish("s", LONE)],
        "payloads": [lambda: c.publish_many("s", ["x", LONE])],
        "stream": [
            lambda: c.publish(LONE, "x"),
            lambda: c.publish_many(LONE, ["x"]),
            lambda: c.subscribe(LONE),
            lambda: c.stream_info(LONE),
            lambda: c.set_stream_retention(LONE, max_len=1),
        ],
        "consumer": [lambda: c.subscribe("s", consumer=LONE)],
        "after": [lambda: c.subscribe("s", after=LONE)],  # type: ignore[arg-type]
        "cursor": [lambda: c.list(cursor=LONE)],
        "state": [lambda: c.list(state=LONE)],  # type: ignore[arg-type]
        "value": [lambda: election.campaign(LONE, timeout=0)],
        "schema": [
            lambda: accord.migration_sql(LONE),
            lambda: accord.Client.connect(sc.url, schema=LONE),
        ],
        "owner": [lambda: accord.Client.connect(sc.url, owner=LONE)],
        "application_name": [lambda: accord.Client.connect(sc.url, application_name=LONE)],
        "listen_url": [lambda: accord.Client.connect(sc.url, listen_url=LONE)],
        "url": [lambda: accord.Client.connect(LONE)],
    }
    for field, fields_calls in calls.items():
        for call in fields_calls:
            with pytest.raises(accord.InvalidArgument) as e:
                call()
            assert str(e.value).startswith(f"invalid {field}: holds an unpaired"), str(e.value)
    sub.close()
    assert c.held_count() == 0
