"""The one guard in front of every server-side fetch (web_fetch, MCP over HTTP, URL import).

A model, a document or a tool result can name any URL; the server must not become a way
into its own network. ``AddressGuard.resolve`` turns a URL into a checked ``Target``:

- only ``http`` and ``https``;
- the host is parsed once, the way a resolver would read it: decimal, octal, hex and
  short IPv4 spellings (``2130706433``, ``0x7f.1``, ``127.1``) are addresses, not names;
- metadata host names (``metadata.google.internal`` ...) and ``localhost`` are refused
  by name, before any lookup;
- a name is resolved once and EVERY address it resolves to is checked; one private
  answer refuses the whole name;
- refused: loopback, private (RFC 1918, CGNAT 100.64/10, ULA fc00::/7), link-local
  (169.254/16 with the cloud metadata address, fe80::/10), unspecified, multicast,
  reserved and broadcast, documentation and benchmarking ranges, and IPv6 forms that
  carry one of those inside (IPv4-mapped, IPv4-compatible, NAT64, 6to4, Teredo);
- unless the host name or the address is allowlisted (names, ``*.suffix`` names, or
  CIDR networks).

``guarded_get`` then connects to the checked address itself, never resolving the name
again (no DNS rebinding between check and use), while sending the original ``Host``
header and TLS SNI, so the certificate is verified against the host name. Redirects are
followed by hand, each hop checked again; the body is streamed and cut at ``max_bytes``;
the whole fetch, lookups included, is bounded by ``timeout``.

What does not belong here: turning pages into text (``builtins/web.py``), deciding which
hosts a deployment allows (``settings.py``).
"""

from __future__ import annotations

import asyncio
import re
import socket
import ssl
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from ipaddress import (
    IPv4Address,
    IPv4Network,
    IPv6Address,
    IPv6Network,
    ip_address,
    ip_network,
)

import httpx

from parley.tools.protocol import ToolError

IPAddress = IPv4Address | IPv6Address
IPNetwork = IPv4Network | IPv6Network
Resolver = Callable[[str, int], Awaitable[Sequence[str]]]
"""``(host, port) -> addresses`` as text; raises OSError when the name does not resolve."""

SCHEMES = frozenset({"http", "https"})

METADATA_NAMES = frozenset(
    {
        "metadata",
        "metadata.google.internal",
        "metadata.goog",
        "instance-data",
        "instance-data.ec2.internal",
        "metadata.azure.internal",
        "metadata.tencentyun.com",
        "metadata.platformequinix.com",
        "metadata.packet.net",
    }
)
"""Cloud instance-metadata host names, refused by name (their addresses are checked too)."""

_BLOCKED_NAME_SUFFIXES = (".localhost", ".internal")
_SENSITIVE_HEADERS = frozenset({"authorization", "cookie", "proxy-authorization"})
_NUMERIC_LABEL = re.compile(r"0[xX][0-9a-fA-F]*|[0-9]+")
_HOST_NAME = re.compile(r"(\*\.)?[a-z0-9_]([a-z0-9_.-]*[a-z0-9_])?")

_BLOCKED_NETWORKS: tuple[tuple[IPNetwork, str], ...] = tuple(
    (ip_network(network), reason)
    for network, reason in (
        ("0.0.0.0/8", "an unspecified ('this network') address"),
        ("10.0.0.0/8", "a private (RFC 1918) address"),
        ("100.64.0.0/10", "a shared (CGNAT) address"),
        ("127.0.0.0/8", "a loopback address"),
        ("169.254.169.254/32", "the cloud metadata address"),
        ("169.254.0.0/16", "a link-local address"),
        ("172.16.0.0/12", "a private (RFC 1918) address"),
        ("192.0.0.0/24", "an IETF protocol address"),
        ("192.0.2.0/24", "a documentation address"),
        ("192.88.99.0/24", "a 6to4 relay address"),
        ("192.168.0.0/16", "a private (RFC 1918) address"),
        ("198.18.0.0/15", "a benchmarking address"),
        ("198.51.100.0/24", "a documentation address"),
        ("203.0.113.0/24", "a documentation address"),
        ("224.0.0.0/4", "a multicast address"),
        ("255.255.255.255/32", "the broadcast address"),
        ("240.0.0.0/4", "a reserved address"),
        ("::/128", "the unspecified address"),
        ("::1/128", "a loopback address"),
        ("::/96", "a deprecated IPv4-compatible IPv6 address"),
        ("64:ff9b:1::/48", "a local-use NAT64 address"),
        ("100::/64", "a discard-only address"),
        ("2001:db8::/32", "a documentation address"),
        ("fd00:ec2::254/128", "the cloud metadata address"),
        ("fc00::/7", "a unique-local (private) address"),
        ("fe80::/10", "a link-local address"),
        ("fec0::/10", "a site-local address"),
        ("ff00::/8", "a multicast address"),
    )
)
_NAT64 = ip_network("64:ff9b::/96")


class FetchError(ToolError):
    """A guarded fetch failed: lookup, connection, timeout, too many redirects."""


class BlockedAddress(FetchError):
    """The guard refused the URL: its scheme, its host, or an address it resolves to."""


def blocked_reason(address: IPAddress) -> str | None:
    """Why ``address`` may not be fetched by default, or None for a public address."""
    if isinstance(address, IPv6Address):
        if address.scope_id:
            return "a scoped (link-local) IPv6 address"
        mapped = address.ipv4_mapped
        if mapped is not None:
            inner = blocked_reason(mapped)
            return None if inner is None else f"an IPv4-mapped form of {mapped}, {inner}"
        for label, embedded in _embedded_ipv4(address):
            inner = blocked_reason(embedded)
            if inner is not None:
                return f"a {label} form of {embedded}, {inner}"
        if address in _NAT64:
            return None  # DNS64 networks reach every public IPv4 address this way
    for network, reason in _BLOCKED_NETWORKS:
        if address.version == network.version and address in network:
            return reason
    if address.is_multicast:
        return "a multicast address"
    if address.is_loopback or address.is_link_local or address.is_unspecified:
        return "a local address"
    if address.is_private or address.is_reserved or not address.is_global:
        return "not a public address"
    return None


def _embedded_ipv4(address: IPv6Address) -> list[tuple[str, IPv4Address]]:
    found: list[tuple[str, IPv4Address]] = []
    if address in _NAT64:
        found.append(("NAT64", IPv4Address(int(address) & 0xFFFFFFFF)))
    if address.sixtofour is not None:
        found.append(("6to4", address.sixtofour))
    if address.teredo is not None:
        server, client = address.teredo
        found += [("Teredo", client), ("Teredo", server)]
    return found


def parse_ipv4_spelling(host: str) -> IPv4Address | None:
    """An IPv4 address in any spelling ``inet_aton`` accepts, or None for a name.

    ``127.1``, ``2130706433``, ``0x7f.1``, ``0177.0.0.1`` all mean 127.0.0.1. A host
    whose last label is a number but that is not a valid address is refused, as the
    URL standard does.
    """
    labels = host.split(".")
    if len(labels) > 1 and labels[-1] == "":
        labels.pop()
    if not _NUMERIC_LABEL.fullmatch(labels[-1]):
        return None
    invalid = BlockedAddress(f"Refused host {host}: neither a valid host name nor an IPv4 address")
    if len(labels) > 4:
        raise invalid
    parts: list[int] = []
    for label in labels:
        if not _NUMERIC_LABEL.fullmatch(label):
            raise invalid
        if label[:2] in ("0x", "0X"):
            parts.append(int(label[2:] or "0", 16))
        elif len(label) > 1 and label.startswith("0"):
            if any(c not in "01234567" for c in label):
                raise invalid
            parts.append(int(label, 8))
        else:
            parts.append(int(label))
    *head, last = parts
    if any(part > 255 for part in head) or last >= 256 ** (5 - len(parts)):
        raise invalid
    value = last
    for index, part in enumerate(head):
        value += part << (8 * (3 - index))
    return IPv4Address(value)


async def system_resolver(host: str, port: int) -> list[str]:
    """The addresses ``host`` resolves to, through the event loop's getaddrinfo."""
    infos = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return [str(info[4][0]) for info in infos]


@dataclass(frozen=True, slots=True)
class Target:
    """A URL the guard has checked, and the addresses to connect to (in order)."""

    url: httpx.URL
    host: str
    """The host as sent in ``Host`` and SNI: an ASCII (IDNA) name or a canonical IP."""
    port: int
    addresses: tuple[IPAddress, ...]
    allowed_by: str | None = None
    """The allowlist entry that let a private host through, if one was needed."""

    @property
    def is_ip_literal(self) -> bool:
        return len(self.addresses) == 1 and str(self.addresses[0]) == self.host

    @property
    def host_header(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return host if self.url.port is None else f"{host}:{self.port}"

    def connect_url(self, address: IPAddress) -> httpx.URL:
        """The URL with the host replaced by the checked address: nothing left to resolve."""
        return self.url.copy_with(host=str(address))


class AddressGuard:
    """Refuses private, local and metadata destinations unless allowlisted.

    ``allow`` holds host names (``intranet.example``, or ``*.example`` for subdomains)
    and IP networks in CIDR form (``127.0.0.1/32``, ``10.0.0.0/8``, ``fd00::/8``). An
    allowlisted name may resolve anywhere; an allowlisted network admits any name that
    resolves into it.
    """

    def __init__(self, allow: Sequence[str] = (), *, resolver: Resolver | None = None) -> None:
        self._networks: list[IPNetwork] = []
        self._names: set[str] = set()
        self._suffixes: list[str] = []
        for raw in allow:
            entry = raw.strip().lower().rstrip(".")
            try:
                self._networks.append(ip_network(entry, strict=False))
                continue
            except ValueError:
                pass
            if not _HOST_NAME.fullmatch(entry):
                raise ValueError(f"allowlist entry {raw!r} is neither a host name nor a network")
            if entry.startswith("*."):
                self._suffixes.append(entry[1:])
            else:
                self._names.add(entry)
        self._resolve = resolver or system_resolver

    def allowing(self, address: IPAddress) -> str | None:
        """The allowlisted network that contains ``address``, if any."""
        for network in self._networks:
            if address.version == network.version and address in network:
                return str(network)
        return None

    def allowing_name(self, host: str) -> str | None:
        if host in self._names:
            return host
        for suffix in self._suffixes:
            if host.endswith(suffix):
                return f"*{suffix}"
        return None

    def check(self, address: IPAddress) -> str | None:
        """Why ``address`` is refused under this guard, or None when it may be fetched."""
        reason = blocked_reason(address)
        if reason is None or self.allowing(address) or self.allowing(_unmapped(address)):
            return None
        return reason

    async def resolve(self, url: str | httpx.URL) -> Target:
        """Check ``url`` and resolve its host once; raises BlockedAddress or FetchError."""
        parsed, host, port, target = self.check_url(url)
        if target is not None:
            return target
        return await self._resolve_name(parsed, host, port, _shown(parsed))

    def check_url(self, url: str | httpx.URL) -> tuple[httpx.URL, str, int, Target | None]:
        """What ``url`` says of itself, checked without DNS: raises BlockedAddress for an
        address or a local or metadata name that is refused. Returns the parsed URL, its
        host and port, and the Target when the host is an IP literal (None: a name that
        still has to be resolved)."""
        parsed = _parse_url(url)
        shown = _shown(parsed)
        host = parsed.raw_host.decode("ascii").lower()
        if host.endswith(".") and not host.endswith(".."):
            host = host[:-1]
        if not host:
            raise BlockedAddress(f"Refused {shown}: the URL has no host")
        port = parsed.port or (443 if parsed.scheme == "https" else 80)
        literal = _literal_address(host)
        if literal is not None:
            address = _unmapped(literal)
            reason = self.check(literal)
            if reason is not None:
                raise BlockedAddress(f"Refused {shown}: {literal} is {reason}")
            allowed_by = self.allowing(literal) or self.allowing(address)
            return parsed, host, port, Target(parsed, str(address), port, (address,), allowed_by)
        if self.allowing_name(host) is None:
            if host in METADATA_NAMES:
                raise BlockedAddress(f"Refused {shown}: {host} is a cloud metadata host")
            if host == "localhost" or host.endswith(_BLOCKED_NAME_SUFFIXES):
                raise BlockedAddress(f"Refused {shown}: {host} is a local host name")
        return parsed, host, port, None

    async def _resolve_name(self, url: httpx.URL, host: str, port: int, shown: str) -> Target:
        allowed_by = self.allowing_name(host)
        try:
            answers = await self._resolve(host, port)
        except OSError as exc:
            raise FetchError(f"Could not resolve {host}: {exc}") from None
        name_allowed = allowed_by is not None
        addresses: list[IPAddress] = []
        for answer in answers:
            try:
                address = ip_address(answer)
            except ValueError:
                raise BlockedAddress(
                    f"Refused {shown}: {host} resolved to {answer!r}, not an IP address"
                ) from None
            if not name_allowed and blocked_reason(address) is not None:
                reason = self.check(address)
                if reason is not None:
                    raise BlockedAddress(f"Refused {shown}: {host} resolves to {address}, {reason}")
                allowed_by = (
                    allowed_by or self.allowing(address) or self.allowing(_unmapped(address))
                )
            unmapped = _unmapped(address)
            if unmapped not in addresses:
                addresses.append(unmapped)
        if not addresses:
            raise FetchError(f"Could not resolve {host}: no addresses")
        return Target(url, host, port, tuple(addresses), allowed_by)


@dataclass(frozen=True, slots=True)
class FetchResult:
    url: str
    """The final URL, after redirects."""
    status: int
    content_type: str
    body: bytes
    truncated: bool
    """True when the body was cut at ``max_bytes``."""
    headers: Mapping[str, str] = field(default_factory=dict, repr=False)
    redirects: tuple[str, ...] = ()
    """The URLs that redirected, in order (the requested URL first)."""


async def guarded_get(
    url: str | httpx.URL,
    *,
    guard: AddressGuard,
    timeout: float,  # noqa: ASYNC109 - bounds the whole fetch, per-operation timeouts too
    max_bytes: int,
    max_redirects: int,
    headers: Mapping[str, str] | None = None,
    verify: ssl.SSLContext | bool = True,
    transport: httpx.AsyncBaseTransport | None = None,
) -> FetchResult:
    """GET ``url`` through ``guard``; any status is a result, refusals and failures raise.

    ``timeout`` bounds the whole fetch (lookups, redirects and body). ``headers`` are
    sent on every hop, except ``Authorization`` and ``Cookie`` once a redirect leaves
    the original origin. ``verify`` is the TLS trust (an ``ssl.SSLContext`` to trust
    another CA); ``transport`` replaces the network, for tests.
    """
    try:
        async with asyncio.timeout(timeout):
            return await _fetch(
                url,
                guard=guard,
                seconds=timeout,
                max_bytes=max_bytes,
                max_redirects=max_redirects,
                headers=dict(headers or {}),
                verify=verify,
                transport=transport,
            )
    except TimeoutError:
        raise FetchError(f"Fetching {_shown_text(url)} took longer than {timeout:g} s") from None
    except httpx.TimeoutException:
        raise FetchError(f"Fetching {_shown_text(url)} timed out after {timeout:g} s") from None
    except httpx.HTTPError as exc:
        raise FetchError(f"Fetching {_shown_text(url)} failed: {_describe(exc)}") from None


async def _fetch(
    url: str | httpx.URL,
    *,
    guard: AddressGuard,
    seconds: float,
    max_bytes: int,
    max_redirects: int,
    headers: dict[str, str],
    verify: ssl.SSLContext | bool,
    transport: httpx.AsyncBaseTransport | None,
) -> FetchResult:
    redirects: list[str] = []
    current: str | httpx.URL = url
    origin: tuple[str, str, int] | None = None
    async with httpx.AsyncClient(
        follow_redirects=False,
        trust_env=False,
        verify=verify,
        transport=transport,
        timeout=httpx.Timeout(seconds),
    ) as client:
        while True:
            target = await guard.resolve(current)
            if origin is None:
                origin = _origin(target)
            elif _origin(target) != origin:
                headers = {k: v for k, v in headers.items() if k.lower() not in _SENSITIVE_HEADERS}
            client.cookies.clear()
            response = await _send(client, target, headers)
            try:
                location = response.headers.get("location")
                if response.is_redirect and location is not None:
                    if len(redirects) >= max_redirects:
                        raise FetchError(
                            f"Fetching {_shown_text(url)} failed: more than "
                            f"{max_redirects} redirects"
                        )
                    redirects.append(_shown(target.url))
                    current = _join(target.url, location)
                    continue
                body, truncated = await _read_capped(response, max_bytes)
            finally:
                await response.aclose()
            return FetchResult(
                url=_shown(target.url),
                status=response.status_code,
                content_type=response.headers.get("content-type", ""),
                body=body,
                truncated=truncated,
                headers=dict(response.headers),
                redirects=tuple(redirects),
            )


async def _send(
    client: httpx.AsyncClient, target: Target, headers: dict[str, str]
) -> httpx.Response:
    """Send to each checked address in turn until one accepts the connection."""
    extensions: dict[str, str] = {}
    if target.url.scheme == "https" and not target.is_ip_literal:
        extensions["sni_hostname"] = target.host
    last: httpx.ConnectError | None = None
    for address in target.addresses:
        request = client.build_request(
            "GET",
            target.connect_url(address),
            headers={**headers, "Host": target.host_header},
            extensions=extensions,
        )
        try:
            return await client.send(request, stream=True)
        except httpx.ConnectError as exc:
            last = exc
    raise FetchError(f"Could not connect to {target.host}:{target.port}: {_describe(last)}")


async def _read_capped(response: httpx.Response, max_bytes: int) -> tuple[bytes, bool]:
    body = bytearray()
    async for chunk in response.aiter_bytes():
        body += chunk
        if len(body) > max_bytes:
            return bytes(body[:max_bytes]), True
    return bytes(body), False


def _parse_url(url: str | httpx.URL) -> httpx.URL:
    if isinstance(url, str) and "\x00" in url:
        raise BlockedAddress("Refused the URL: it contains a NUL character")
    try:
        parsed = url if isinstance(url, httpx.URL) else httpx.URL(url.strip())
    except (httpx.InvalidURL, ValueError, TypeError) as exc:
        raise BlockedAddress(f"Refused {_shown_text(url)}: not a valid URL ({exc})") from None
    if parsed.scheme not in SCHEMES:
        scheme = parsed.scheme or "none"
        raise BlockedAddress(
            f"Refused {_shown_text(url)}: only http and https URLs may be fetched "
            f"(scheme: {scheme})"
        )
    return parsed


def _literal_address(host: str) -> IPAddress | None:
    if ":" in host:
        if "%" in host:
            raise BlockedAddress(f"Refused [{host}]: scoped IPv6 addresses are not fetched")
        try:
            return IPv6Address(host)
        except ValueError:
            raise BlockedAddress(f"Refused [{host}]: not a valid IPv6 address") from None
    return parse_ipv4_spelling(host)


def _unmapped(address: IPAddress) -> IPAddress:
    if isinstance(address, IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped
    return address


def _origin(target: Target) -> tuple[str, str, int]:
    return (target.url.scheme, target.host, target.port)


def _join(base: httpx.URL, location: str) -> httpx.URL:
    try:
        return base.join(location)
    except (httpx.InvalidURL, ValueError) as exc:
        raise FetchError(f"Redirect from {_shown(base)} to an invalid URL: {exc}") from None


def _shown(url: httpx.URL) -> str:
    """The URL without credentials, for messages and results."""
    return str(url.copy_with(username=None, password=None)) if url.userinfo else str(url)


def _shown_text(url: str | httpx.URL) -> str:
    if isinstance(url, httpx.URL):
        return _shown(url)
    return url if len(url) <= 200 else url[:200] + "..."


def _describe(exc: BaseException | None) -> str:
    if exc is None:
        return "no address to connect to"
    return str(exc) or type(exc).__name__
