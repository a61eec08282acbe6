"""Where a webhook may point, and how it is reached without being turned against the platform.

A webhook URL is a request the platform makes on a user's behalf, so it must not reach the
platform's own network: loopback, link-local (cloud metadata at 169.254.169.254), private,
carrier-grade NAT, multicast, reserved and unspecified addresses are refused unless a platform
admin allowed private networks for that hook. The name is resolved and checked when the hook is
saved and again at every delivery, and the request then goes to the very address that was
checked (the host name is kept for the Host header and TLS), so a DNS answer that changes
between the check and the connection (DNS rebinding) cannot redirect it. Redirects are not
followed.
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Callable
from dataclasses import dataclass
from urllib.parse import urlsplit, urlunsplit

import httpx

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
        address = info[4][0]
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


def check_url(url: str, *, allow_private: bool, resolver: Resolver | None = None) -> Target:
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


def pinned_post(
    target: Target,
    *,
    content: bytes,
    headers: dict[str, str],
    timeout_s: float,
) -> httpx.Response:
    """POST to the first checked address of ``target``, keeping its host name for the Host
    header and TLS (SNI and certificate check). No redirects, no proxies from the environment."""
    parts = urlsplit(target.url)
    address = target.addresses[0]
    literal = f"[{address}]" if ":" in address else address
    netloc = f"{literal}:{target.port}"
    pinned = urlunsplit((parts.scheme, netloc, parts.path or "/", parts.query, ""))
    default_port = 443 if target.scheme == "https" else 80
    host_header = target.host if target.port == default_port else f"{target.host}:{target.port}"
    extensions = {"sni_hostname": target.host} if target.scheme == "https" else {}
    with httpx.Client(timeout=timeout_s, follow_redirects=False, trust_env=False) as client:
        return client.post(
            pinned,
            content=content,
            headers={**headers, "Host": host_header},
            extensions=extensions,
        )
