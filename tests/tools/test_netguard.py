"""The shared fetch guard: every refused form, the allowlist, and real loopback fetches.

Unit tests resolve names through a fake resolver (no network). The fetch tests run small
HTTP servers on 127.0.0.1 (and 127.0.0.2, also loopback) inside the test's event loop.
"""

from __future__ import annotations

import asyncio
import socket
import ssl
import subprocess
import time
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from ipaddress import ip_address
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, quote

import httpx
import pytest

from parley.tools.netguard import (
    AddressGuard,
    BlockedAddress,
    FetchError,
    blocked_reason,
    guarded_get,
    parse_ipv4_spelling,
    system_resolver,
)
from parley.tools.protocol import ToolError

pytestmark = pytest.mark.anyio

PUBLIC_V4 = "93.184.216.34"
PUBLIC_V6 = "2606:2800:220:1:248:1893:25c8:1946"


class FakeResolver:
    """Answers from a table (one answer list per call, the last one repeating)."""

    def __init__(self, table: Mapping[str, Sequence[Sequence[str]]]) -> None:
        self.table = table
        self.calls: list[str] = []

    async def __call__(self, host: str, port: int) -> list[str]:
        self.calls.append(host)
        answers = self.table.get(host)
        if answers is None:
            raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
        index = min(self.calls.count(host) - 1, len(answers) - 1)
        return list(answers[index])


def guard(allow: Sequence[str] = (), **names: Sequence[str]) -> AddressGuard:
    table = {name.replace("_", "."): [list(answers)] for name, answers in names.items()}
    return AddressGuard(allow, resolver=FakeResolver(table))


# ---------------------------------------------------------------- refused by default

BLOCKED_LITERALS = [
    # loopback
    "http://127.0.0.1/",
    "http://127.255.255.254:8080/x",
    "http://[::1]/",
    # private, CGNAT, ULA
    "http://10.0.0.1/",
    "http://172.16.5.4/",
    "http://172.31.255.255/",
    "http://192.168.1.1/",
    "http://100.64.0.1/",
    "http://100.100.100.200/",  # Alibaba metadata, CGNAT range
    "http://[fc00::1]/",
    "http://[fd12:3456::1]/",
    "http://[fd00:ec2::254]/",  # AWS IPv6 metadata
    # link-local and metadata
    "http://169.254.169.254/latest/meta-data/",
    "http://169.254.1.1/",
    "http://[fe80::1]/",
    "http://192.0.0.192/",  # Oracle metadata, IETF protocol range
    # unspecified
    "http://0.0.0.0/",
    "http://[::]/",
    "http://0/",
    # multicast, reserved, broadcast
    "http://224.0.0.1/",
    "http://239.255.255.250/",
    "http://[ff02::1]/",
    "http://240.0.0.1/",
    "http://255.255.255.255/",
    # IPv4-mapped / compatible IPv6
    "http://[::ffff:127.0.0.1]/",
    "http://[::ffff:7f00:1]/",
    "http://[::ffff:169.254.169.254]/",
    "http://[::ffff:10.0.0.1]/",
    "http://[::127.0.0.1]/",
    "http://[::a9fe:a9fe]/",
    # NAT64, 6to4, Teredo forms
    "http://[64:ff9b::7f00:1]/",
    "http://[64:ff9b::a9fe:a9fe]/",
    "http://[64:ff9b::10.0.0.1]/",
    "http://[2002:7f00:1::]/",
    "http://[2002:a9fe:a9fe::1]/",
    "http://[2002:c0a8:101::1]/",
    "http://[2001:0:4136:e378:8000:63bf:80ff:fffe]/",  # Teredo, client 127.0.0.1
    # decimal, octal, hex and short IPv4 spellings
    "http://2130706433/",
    "http://0x7f000001/",
    "http://0x7f.1/",
    "http://0x7F.0.0.1/",
    "http://127.1/",
    "http://127.0.1/",
    "http://017700000001/",
    "http://0177.1/",
    "http://0xa9fea9fe/",
    "http://2852039166/",  # 169.254.169.254
    "http://3232235777/",  # 192.168.1.1
    "http://0x0a.0.0.1/",
    "http://127.0.0.1./",
    # URL tricks that leave the real host private
    "http://example.com@127.0.0.1/",
    "http://user:pass@169.254.169.254/",
    "http://127.0.0.1#@example.com/",
    "HTTP://127.0.0.1/",
]


@pytest.mark.parametrize("url", BLOCKED_LITERALS)
async def test_private_addresses_are_refused(url: str) -> None:
    resolver = FakeResolver({})
    with pytest.raises(BlockedAddress, match="Refused"):
        await AddressGuard(resolver=resolver).resolve(url)
    assert resolver.calls == []  # addresses are never looked up


@pytest.mark.parametrize(
    "url",
    [
        "http://0177.0.0.1/",  # dotted octal, refused as an invalid URL
        "http://1.2.3.4.5/",
        "http://foo.127/",
        "http://08.0.0.1/",
        "http://0x100000000/",
        "http://256.1.1.1/",
        "http://[fe80::1%25eth0]/",
        "http://",
        "http:///path",
    ],
)
async def test_malformed_hosts_are_refused(url: str) -> None:
    with pytest.raises(BlockedAddress):
        await AddressGuard(resolver=FakeResolver({})).resolve(url)


@pytest.mark.parametrize(
    "url",
    [
        "file:///etc/passwd",
        "ftp://example.com/file",
        "gopher://127.0.0.1:6379/_INFO",
        "dict://127.0.0.1:11211/stats",
        "javascript:alert(1)",
        "data:text/plain,hello",
        "ws://example.com/socket",
        "example.com/no-scheme",
    ],
)
async def test_other_schemes_are_refused(url: str) -> None:
    with pytest.raises(BlockedAddress, match="only http and https"):
        await AddressGuard(resolver=FakeResolver({"example.com": [[PUBLIC_V4]]})).resolve(url)


@pytest.mark.parametrize(
    "host",
    [
        "localhost",
        "LOCALHOST",
        "localhost.",
        "api.localhost",
        "metadata",
        "metadata.google.internal",
        "METADATA.GOOGLE.INTERNAL.",
        "metadata.goog",
        "instance-data",
        "instance-data.ec2.internal",
        "anything.internal",
    ],
)
async def test_local_and_metadata_names_are_refused_before_lookup(host: str) -> None:
    # The resolver would answer with a public address: the name alone is refused.
    resolver = FakeResolver({host.lower().rstrip("."): [[PUBLIC_V4]]})
    with pytest.raises(BlockedAddress, match="Refused"):
        await AddressGuard(resolver=resolver).resolve(f"http://{host}/")
    assert resolver.calls == []


@pytest.mark.parametrize(
    "answers",
    [
        ["127.0.0.1"],
        ["::1"],
        ["10.1.2.3"],
        ["169.254.169.254"],
        ["::ffff:192.168.0.1"],
        ["fe80::1%eth0"],
        ["64:ff9b::a9fe:a9fe"],
        [PUBLIC_V4, "10.0.0.7"],  # one private answer refuses the whole name
        [PUBLIC_V6, "::1"],
        [PUBLIC_V4, "0.0.0.0"],
    ],
)
async def test_names_resolving_to_private_addresses_are_refused(answers: list[str]) -> None:
    with pytest.raises(BlockedAddress, match=r"sneaky\.example resolves to"):
        await guard(sneaky_example=answers).resolve("https://sneaky.example/path")


async def test_unresolvable_names_fail_clearly() -> None:
    with pytest.raises(FetchError, match=r"Could not resolve nowhere\.example") as caught:
        await guard().resolve("http://nowhere.example/")
    assert not isinstance(caught.value, BlockedAddress)
    assert isinstance(caught.value, ToolError)  # the model is told


async def test_public_addresses_pass() -> None:
    checked = guard(www_example_com=[PUBLIC_V4, PUBLIC_V6])
    target = await checked.resolve("https://www.example.com:8443/a?b=c")
    assert target.host == "www.example.com"
    assert target.port == 8443
    assert target.addresses == (ip_address(PUBLIC_V4), ip_address(PUBLIC_V6))
    assert target.host_header == "www.example.com:8443"
    assert str(target.connect_url(target.addresses[0])) == f"https://{PUBLIC_V4}:8443/a?b=c"
    for url in (f"http://{PUBLIC_V4}/", f"http://[{PUBLIC_V6}]/", "http://[64:ff9b::5db8:d822]/"):
        assert (await guard().resolve(url)).allowed_by is None


def test_ipv4_spellings() -> None:
    loopback = ip_address("127.0.0.1")
    for spelling in ("2130706433", "0x7f000001", "0x7f.1", "127.1", "0177.0.0.01", "127.0.1"):
        assert parse_ipv4_spelling(spelling) == loopback
    assert parse_ipv4_spelling("example.com") is None
    assert parse_ipv4_spelling("1e100.net") is None


def test_blocked_reasons_name_the_problem() -> None:
    assert blocked_reason(ip_address("169.254.169.254")) == "the cloud metadata address"
    assert "loopback" in (blocked_reason(ip_address("::ffff:127.0.0.1")) or "")
    assert "6to4" in (blocked_reason(ip_address("2002:7f00:1::")) or "")
    assert blocked_reason(ip_address(PUBLIC_V4)) is None


# ---------------------------------------------------------------- the allowlist


async def test_allowlisted_network() -> None:
    checked = guard(
        ["127.0.0.1/32", "10.0.0.0/8"],
        intranet_example=["10.20.30.40"],
        mixed_example=["10.20.30.40", "192.168.0.9"],
    )
    target = await checked.resolve("http://127.0.0.1:9000/")
    assert target.allowed_by == "127.0.0.1/32"
    assert (await checked.resolve("http://2130706433/")).allowed_by == "127.0.0.1/32"
    assert (await checked.resolve("http://intranet.example/")).allowed_by == "10.0.0.0/8"
    with pytest.raises(BlockedAddress):
        await checked.resolve("http://127.0.0.2/")
    with pytest.raises(BlockedAddress):
        await checked.resolve("http://192.168.0.1/")
    with pytest.raises(BlockedAddress, match=r"192\.168\.0\.9"):  # each answer needs its own pass
        await checked.resolve("http://mixed.example/")


async def test_allowlisted_names() -> None:
    checked = guard(
        ["intranet.example", "*.corp.example", "metadata.google.internal"],
        intranet_example=["10.1.2.3"],
        other_example=["10.1.2.3"],
        wiki_corp_example=["192.168.4.4"],
        corp_example=["192.168.4.5"],
        metadata_google_internal=["169.254.169.254"],
    )
    assert (await checked.resolve("http://INTRANET.example./")).allowed_by == "intranet.example"
    assert (await checked.resolve("http://wiki.corp.example/")).allowed_by == "*.corp.example"
    target = await checked.resolve("http://metadata.google.internal/")
    assert target.addresses == (ip_address("169.254.169.254"),)
    for refused in ("http://other.example/", "http://corp.example/"):
        with pytest.raises(BlockedAddress):
            await checked.resolve(refused)


def test_bad_allowlist_entries() -> None:
    with pytest.raises(ValueError, match="neither a host name nor a network"):
        AddressGuard(["http://example.com/"])


async def test_system_resolver_reads_localhost() -> None:
    addresses = await system_resolver("localhost", 80)
    assert {"127.0.0.1", "::1"} & set(addresses)
    target = await AddressGuard(["localhost"]).resolve("http://localhost:1/")
    assert all(address.is_loopback for address in target.addresses)


# ---------------------------------------------------------------- loopback servers


class Loopback:
    """A tiny HTTP/1.1 server that records what it is asked."""

    def __init__(
        self, name: str, host: str = "127.0.0.1", port: int = 0, tls: ssl.SSLContext | None = None
    ) -> None:
        self.name, self.host, self.port, self.tls = name, host, port, tls
        self.requests: list[tuple[str, dict[str, str]]] = []
        self._release = asyncio.Event()
        self._tasks: set[asyncio.Task[None]] = set()
        self._server: asyncio.Server | None = None

    async def start(self) -> None:
        self._server = await asyncio.start_server(
            self._connected, self.host, self.port, ssl=self.tls
        )
        self.port = self._server.sockets[0].getsockname()[1]

    async def stop(self) -> None:
        self._release.set()
        assert self._server is not None
        self._server.close()
        if self._tasks:
            await asyncio.wait(self._tasks, timeout=5)

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def _connected(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.ensure_future(self._serve(reader, writer))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await reader.readuntil(b"\r\n\r\n")
            request_line, *lines = head.decode("latin-1").split("\r\n")
            target = request_line.split(" ")[1]
            headers = {
                key.strip().lower(): value.strip()
                for key, value in (line.split(":", 1) for line in lines if ":" in line)
            }
            self.requests.append((target, headers))
            path, _, query = target.partition("?")
            if path == "/hang":
                await self._release.wait()
                return
            status, extra, body = self.respond(path, parse_qs(query), headers)
            lines = [f"HTTP/1.1 {status} X", f"Content-Length: {len(body)}", "Connection: close"]
            lines += [f"{key}: {value}" for key, value in extra.items()]
            writer.write(("\r\n".join(lines) + "\r\n\r\n").encode() + body)
            await writer.drain()
        except (OSError, asyncio.IncompleteReadError, ssl.SSLError):
            pass
        finally:
            writer.close()

    def respond(
        self, path: str, query: dict[str, list[str]], headers: dict[str, str]
    ) -> tuple[int, dict[str, str], bytes]:
        match path:
            case "/host":
                return 200, {"Content-Type": "text/plain"}, headers.get("host", "").encode()
            case "/redirect":
                return 302, {"Location": query["to"][0]}, b""
            case "/loop":
                return 302, {"Location": "/loop"}, b""
            case "/big":
                return 200, {"Content-Type": "text/plain"}, b"x" * 100_000
            case "/exact":
                return 200, {"Content-Type": "text/plain"}, b"y" * 1000
            case _:
                return 200, {"Content-Type": "text/plain"}, f"hello from {self.name}".encode()


@asynccontextmanager
async def serving(*servers: Loopback) -> AsyncIterator[None]:
    for server in servers:
        await server.start()
    try:
        yield
    finally:
        for server in servers:
            await server.stop()


@pytest.fixture
async def server() -> AsyncIterator[Loopback]:
    loopback = Loopback("A")
    async with serving(loopback):
        yield loopback


@asynccontextmanager
async def twin_servers() -> AsyncIterator[tuple[Loopback, Loopback]]:
    """A on 127.0.0.1 and B on 127.0.0.2, on the same port."""
    for _ in range(5):
        first = Loopback("A")
        await first.start()
        second = Loopback("B", host="127.0.0.2", port=first.port)
        try:
            await second.start()
        except OSError:
            await first.stop()
            continue
        try:
            yield first, second
        finally:
            await first.stop()
            await second.stop()
        return
    pytest.skip("cannot bind 127.0.0.2 next to 127.0.0.1")


async def get(url: str, checked: AddressGuard, **options: Any) -> Any:
    limits: dict[str, Any] = {"timeout": 5.0, "max_bytes": 1 << 20, "max_redirects": 5}
    return await guarded_get(url, guard=checked, **{**limits, **options})


async def test_loopback_is_refused_by_default(server: Loopback) -> None:
    with pytest.raises(BlockedAddress, match="loopback"):
        await get(f"{server.url}/", AddressGuard())
    assert server.requests == []


async def test_loopback_is_fetched_when_allowlisted(server: Loopback) -> None:
    result = await get(f"{server.url}/", AddressGuard(["127.0.0.1/32"]))
    assert (result.status, result.body, result.truncated) == (200, b"hello from A", False)
    assert result.content_type == "text/plain"
    assert result.url == f"{server.url}/"
    assert server.requests[0][1]["host"] == f"127.0.0.1:{server.port}"


async def test_redirect_to_a_blocked_address_is_refused() -> None:
    async with twin_servers() as (allowed, forbidden):
        checked = AddressGuard(["127.0.0.1/32"])
        for to in (
            f"http://127.0.0.2:{forbidden.port}/",
            f"http://2130706434:{forbidden.port}/",
            "http://169.254.169.254/latest/meta-data/",
            "http://[::ffff:127.0.0.2]/",
            "file:///etc/passwd",
        ):
            with pytest.raises(BlockedAddress):
                await get(f"{allowed.url}/redirect?to={quote(to, safe='')}", checked)
        assert len(allowed.requests) == 5  # every redirect was really served, then refused
        assert forbidden.requests == []
        # The same redirect is followed when its target is allowlisted too.
        result = await get(
            f"{allowed.url}/redirect?to={quote(f'http://127.0.0.2:{forbidden.port}/x')}",
            AddressGuard(["127.0.0.0/30"]),
        )
        assert result.body == b"hello from B"


async def test_redirects_are_followed_and_counted(server: Loopback) -> None:
    checked = AddressGuard(["127.0.0.1/32"])
    result = await get(f"{server.url}/redirect?to=/host", checked)
    assert result.url == f"{server.url}/host"
    assert result.redirects == (f"{server.url}/redirect?to=/host",)
    with pytest.raises(FetchError, match="more than 3 redirects"):
        await get(f"{server.url}/loop", checked, max_redirects=3)


async def test_body_is_cut_at_max_bytes(server: Loopback) -> None:
    checked = AddressGuard(["127.0.0.1/32"])
    result = await get(f"{server.url}/big", checked, max_bytes=1000)
    assert (len(result.body), result.truncated) == (1000, True)
    exact = await get(f"{server.url}/exact", checked, max_bytes=1000)
    assert (len(exact.body), exact.truncated) == (1000, False)


async def test_total_time_is_capped(server: Loopback) -> None:
    started = time.monotonic()
    with pytest.raises(FetchError, match=r"0\.5 s"):
        await get(f"{server.url}/hang", AddressGuard(["127.0.0.1/32"]), timeout=0.5)
    assert time.monotonic() - started < 3
    assert [path for path, _ in server.requests] == ["/hang"]


async def test_connects_to_the_checked_address_with_the_original_host(server: Loopback) -> None:
    # app.test does not resolve on this machine: only the guard's own answer can be used.
    resolver = FakeResolver({"app.test": [["127.0.0.1"]]})
    checked = AddressGuard(["127.0.0.1/32"], resolver=resolver)
    result = await get(f"http://app.test:{server.port}/host", checked)
    assert result.body == f"app.test:{server.port}".encode()
    assert result.url == f"http://app.test:{server.port}/host"
    assert resolver.calls == ["app.test"]


async def test_dns_rebinding_cannot_move_the_connection(monkeypatch: pytest.MonkeyPatch) -> None:
    """rebind.test answers 127.0.0.1 (allowlisted) first, then 127.0.0.2 (refused).

    The guard checks the first answer and must connect to it; anything that looks the
    name up again lands on server B, which must see nothing. The control at the end
    shows that a plain client really is moved to B by this resolver.
    """
    real_getaddrinfo = socket.getaddrinfo
    lookups: list[str] = []

    def rebinding(host: Any, port: Any, *args: Any, **kwargs: Any) -> Any:
        if host in ("rebind.test", b"rebind.test"):
            lookups.append("rebind.test")
            address = "127.0.0.1" if len(lookups) == 1 else "127.0.0.2"
            return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", (address, int(port)))]
        return real_getaddrinfo(host, port, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", rebinding)
    async with twin_servers() as (first, second):
        url = f"http://rebind.test:{first.port}/host"
        result = await get(url, AddressGuard(["127.0.0.1/32"]))
        assert result.body == f"rebind.test:{first.port}".encode()
        assert (len(first.requests), second.requests, lookups) == (1, [], ["rebind.test"])
        # Asked again, the name now points at a refused address.
        with pytest.raises(BlockedAddress, match=r"127\.0\.0\.2"):
            await get(url, AddressGuard(["127.0.0.1/32"]))
        assert second.requests == []
        # Control: a client that resolves for itself is moved to B.
        async with httpx.AsyncClient(trust_env=False) as naive:
            response = await naive.get(f"http://rebind.test:{first.port}/")
        assert response.text == "hello from B"


async def test_dns_rebinding_public_then_loopback() -> None:
    """The check sees a public address; the connection must go to that same address."""
    resolver = FakeResolver({"rebind.test": [[PUBLIC_V4], [PUBLIC_V4], ["127.0.0.1"]]})
    seen: list[httpx.Request] = []

    def record(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(200, text="ok")

    checked = AddressGuard(resolver=resolver)
    for scheme in ("http", "https"):
        result = await get(
            f"{scheme}://rebind.test/page", checked, transport=httpx.MockTransport(record)
        )
        assert result.url == f"{scheme}://rebind.test/page"
    assert [request.url.host for request in seen] == [PUBLIC_V4, PUBLIC_V4]
    assert [request.headers["host"] for request in seen] == ["rebind.test", "rebind.test"]
    assert seen[1].extensions["sni_hostname"] == "rebind.test"
    assert resolver.calls == ["rebind.test", "rebind.test"]  # once per fetch, never again
    # A third fetch gets the loopback answer and is refused before connecting.
    with pytest.raises(BlockedAddress):
        await get("http://rebind.test/", checked, transport=httpx.MockTransport(record))
    assert len(seen) == 2


async def test_credentials_are_dropped_when_a_redirect_leaves_the_origin() -> None:
    resolver = FakeResolver({"a.example": [[PUBLIC_V4]], "b.example": [[PUBLIC_V4]]})
    seen: list[httpx.Request] = []

    def record(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        if request.headers["host"] == "a.example":
            return httpx.Response(302, headers={"Location": "http://b.example/"})
        return httpx.Response(200)

    await get(
        "http://a.example/",
        AddressGuard(resolver=resolver),
        headers={"Authorization": "Bearer secret", "X-Other": "kept"},
        transport=httpx.MockTransport(record),
    )
    assert seen[0].headers["authorization"] == "Bearer secret"
    assert "authorization" not in seen[1].headers
    assert seen[1].headers["x-other"] == "kept"


# ---------------------------------------------------------------- TLS to a pinned address


def _certificate(folder: Path, name: str) -> tuple[Path, Path]:
    cert, key = folder / f"{name}.pem", folder / f"{name}.key"
    try:
        subprocess.run(
            [
                "openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
                "-keyout", str(key), "-out", str(cert), "-subj", f"/CN={name}",
                "-addext", f"subjectAltName=DNS:{name}",
            ],
            check=True,
            capture_output=True,
        )  # fmt: skip
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("openssl is not available to make a test certificate")
    return cert, key


async def test_tls_uses_the_host_name_for_sni_and_verification(tmp_path: Path) -> None:
    cert, key = _certificate(tmp_path, "secure.test")
    server_context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server_context.load_cert_chain(cert, key)
    names: list[str | None] = []

    def record_sni(_socket: ssl.SSLObject, name: str | None, _context: ssl.SSLContext) -> None:
        names.append(name)

    server_context.sni_callback = record_sni
    client_context = ssl.create_default_context(cafile=str(cert))
    loopback = Loopback("TLS", tls=server_context)
    resolver = FakeResolver({"secure.test": [["127.0.0.1"]], "other.test": [["127.0.0.1"]]})
    checked = AddressGuard(["127.0.0.1/32"], resolver=resolver)
    async with serving(loopback):
        result = await get(
            f"https://secure.test:{loopback.port}/host", checked, verify=client_context
        )
        assert result.body == f"secure.test:{loopback.port}".encode()
        assert names == ["secure.test"]
        # The same address under another name fails verification: the name is checked.
        with pytest.raises(FetchError, match=r"(?i)certificate|hostname"):
            await get(f"https://other.test:{loopback.port}/", checked, verify=client_context)
