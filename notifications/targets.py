"""Where a webhook may point, and how it is reached without being turned against the platform.

A webhook URL is a request the platform makes on a user's behalf, so it must not reach the
platform's own network: loopback, link-local (cloud metadata at 169.254.169.254), private,
carrier-grade NAT, multicast, reserved and unspecified addresses are refused unless a platform
admin allowed private networks for that hook. The name is resolved and checked when the hook is
saved and again at every delivery, and the request then goes to the very address that was
checked (the host name is kept for the Host header and TLS), so a DNS answer that changes
between the check and the connection (DNS rebinding) cannot redirect it. Redirects are not
followed.

A receiver is the hook owner's, so it must not hold a worker either: the whole request (connect,
send, every byte of the answer) has one deadline, not a timeout per read that a receiver
answering a byte at a time never reaches, and only the first ``REPLY_LIMIT_BYTES`` of the answer
are read.
"""

from __future__ import annotations

import ipaddress
import socket
import ssl
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import httpcore
import httpx

# Of a receiver's answer only an excerpt is kept (the delivery log shows 500 characters).
REPLY_LIMIT_BYTES = 64 * 1024

Resolver = Callable[[str, int], list[str]]


class TargetRefused(Exception):
    """The URL is malformed or points where webhooks may not go; ``str()`` says why."""


def resolve(host: str, port: int) -> list[str]:
    """Every address ``host`` resolves to (IPv4 and IPv6), in resolver order."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError) as exc:
        raise TargetRefused(f"{host} does not resolve ({exc})") from None
    seen: list[str] = []
    for info in infos:
        address = str(info[4][0])  # an IPv6 sockaddr types its fields as str | int
        if address not in seen:
            seen.append(address)
    return seen


def address_problem(address: str) -> str | None:
    """Why a webhook may not connect to ``address``, or None when it is a public address."""
    ip = ipaddress.ip_address(address.split("%", 1)[0])
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    checks = (
        (ip.is_loopback, "a loopback address"),
        (ip.is_link_local, "a link-local address"),
        (ip.is_unspecified, "an unspecified address"),
        (ip.is_multicast, "a multicast address"),
        (ip in ipaddress.ip_network("100.64.0.0/10"), "a carrier-grade NAT address"),
        (ip.is_reserved, "a reserved address"),
        (ip.is_private, "a private address"),
        (not ip.is_global, "not a public address"),
    )
    for hit, reason in checks:
        if hit:
            return reason
    return None


@dataclass(frozen=True)
class Target:
    url: str
    scheme: str
    host: str
    port: int
    addresses: tuple[str, ...]


def check_url(url: object, *, allow_private: bool, resolver: Resolver | None = None) -> Target:
    """Parse, resolve (with ``resolver``, else the system's) and check ``url``. Raises
    :class:`TargetRefused` with the reason."""
    if not isinstance(url, str) or not url.strip():
        raise TargetRefused("must not be blank")
    url = url.strip()
    if len(url) > 500:
        raise TargetRefused("must be at most 500 characters")
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https"):
        raise TargetRefused("must be an http:// or https:// URL")
    if not parts.hostname:
        raise TargetRefused("has no host name")
    if parts.username or parts.password:
        raise TargetRefused("must not carry a user name or password (put secrets in the path)")
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError:
        raise TargetRefused("has an invalid port") from None
    host = parts.hostname
    addresses = (resolver or resolve)(host, port)
    if not addresses:
        raise TargetRefused(f"{host} does not resolve")
    if not allow_private:
        for address in addresses:
            problem = address_problem(address)
            if problem:
                raise TargetRefused(
                    f"{host} resolves to {address}, {problem}: webhooks may not reach the "
                    "platform's own network (a platform admin can allow private networks for "
                    "this hook)"
                )
    return Target(url, parts.scheme, host, port, tuple(addresses))


@dataclass(frozen=True)
class Reply:
    status_code: int
    body: bytes  # at most REPLY_LIMIT_BYTES

    @property
    def text(self) -> str:
        return self.body.decode("utf-8", errors="replace")


class _Deadline(httpcore.NetworkBackend):
    """Connections whose every connect, read and write ends by one monotonic deadline."""

    def __init__(self, deadline: float) -> None:
        self.deadline = deadline
        self._sockets = httpcore.SyncBackend()

    def left(self, timeout: float | None) -> float:
        left = self.deadline - time.monotonic()
        if left <= 0:
            raise httpcore.ReadTimeout("the receiver took longer than the delivery's deadline")
        return left if timeout is None else min(timeout, left)

    def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.NetworkStream:
        stream = self._sockets.connect_tcp(
            host, port, self.left(timeout), local_address, socket_options
        )
        return _DeadlineStream(stream, self)

    def connect_unix_socket(
        self,
        path: str,
        timeout: float | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.NetworkStream:
        raise httpcore.ConnectError("webhooks go over TCP")

    def sleep(self, seconds: float) -> None:
        time.sleep(min(seconds, max(0.0, self.deadline - time.monotonic())))


class _DeadlineStream(httpcore.NetworkStream):
    def __init__(self, stream: httpcore.NetworkStream, deadline: _Deadline) -> None:
        self._stream = stream
        self._deadline = deadline

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        return self._stream.read(max_bytes, self._deadline.left(timeout))

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        self._stream.write(buffer, self._deadline.left(timeout))

    def close(self) -> None:
        self._stream.close()

    def start_tls(
        self,
        ssl_context: ssl.SSLContext,
        server_hostname: str | None = None,
        timeout: float | None = None,
    ) -> httpcore.NetworkStream:
        tls = self._stream.start_tls(ssl_context, server_hostname, self._deadline.left(timeout))
        return _DeadlineStream(tls, self._deadline)

    def get_extra_info(self, info: str) -> Any:
        return self._stream.get_extra_info(info)


def pinned_post(
    target: Target,
    *,
    content: bytes,
    headers: dict[str, str],
    timeout_s: float,
) -> Reply:
    """POST to the first checked address of ``target``, keeping its host name for the Host
    header and TLS (SNI and certificate check, against the public CAs httpx trusts). No
    redirects, no proxies from the environment; all of it within ``timeout_s``."""
    parts = urlsplit(target.url)
    address = target.addresses[0]
    literal = f"[{address}]" if ":" in address else address
    netloc = f"{literal}:{target.port}"
    pinned = urlunsplit((parts.scheme, netloc, parts.path or "/", parts.query, ""))
    default_port = 443 if target.scheme == "https" else 80
    host_header = target.host if target.port == default_port else f"{target.host}:{target.port}"
    extensions: dict[str, Any] = {
        "timeout": dict.fromkeys(("connect", "read", "write", "pool"), timeout_s)
    }
    if target.scheme == "https":
        extensions["sni_hostname"] = target.host
    deadline = _Deadline(time.monotonic() + timeout_s)
    with (
        httpcore.ConnectionPool(
            ssl_context=httpx.create_ssl_context(trust_env=False),
            network_backend=deadline,
            max_connections=1,
        ) as pool,
        pool.stream(
            "POST",
            pinned,
            headers=[
                ("Host", host_header),
                *headers.items(),
                ("Content-Length", str(len(content))),
            ],
            content=content,
            extensions=extensions,
        ) as response,
    ):
        body = b""
        for chunk in response.iter_stream():
            body += chunk
            if len(body) >= REPLY_LIMIT_BYTES:
                break
    return Reply(response.status, body[:REPLY_LIMIT_BYTES])
