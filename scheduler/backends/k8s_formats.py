"""The texts the Kubernetes backend writes and reads back: checkpoint request ids (a pod
annotation), the cursor over a ``timestamps=true`` pod log, and the address blocks of the
egress setting."""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Sequence
from datetime import UTC, datetime

_REQUEST_ID_FORMAT = "%Y%m%dT%H%M%S.%fZ"


def checkpoint_request_id(now: datetime) -> str:
    """A checkpoint request id: the UTC time of the request (sortable, readable)."""
    return now.astimezone(UTC).strftime(_REQUEST_ID_FORMAT)


def parse_checkpoint_request_id(value: str) -> datetime | None:
    """The time of a request id from :func:`checkpoint_request_id`; ``None`` if not one."""
    try:
        return datetime.strptime(value, _REQUEST_ID_FORMAT).replace(tzinfo=UTC)
    except ValueError:
        return None


# --------------------------------------------------------------------------- pod logs


def log_cursor(ns: int, same: int) -> str:
    """A pod-log cursor: the timestamp (ns since the epoch) of the last line read and how many
    lines with exactly that timestamp were read."""
    return f"k8s-{ns}-{same}"


def parse_log_cursor(cursor: str) -> tuple[int, int]:
    match = re.fullmatch(r"k8s-(\d{1,20})-(\d{1,9})", cursor)
    if match is None:
        raise ValueError(f"not a log cursor: {cursor[:40]!r}")
    return int(match[1]), int(match[2])


_LOG_TIME = re.compile(r"(\d{4})-(\d\d)-(\d\d)T(\d\d):(\d\d):(\d\d)(?:\.(\d{1,9}))?Z")


def log_time_ns(stamp: str) -> int | None:
    """Nanoseconds since the epoch of an RFC 3339 timestamp as ``timestamps=true`` prints it."""
    match = _LOG_TIME.fullmatch(stamp)
    if match is None:
        return None
    year, month, day, hour, minute, second = (int(match[i]) for i in range(1, 7))
    whole = datetime(year, month, day, hour, minute, second, tzinfo=UTC)
    fraction = (match[7] or "").ljust(9, "0")
    return int(whole.timestamp()) * 1_000_000_000 + int(fraction)


def read_timestamped_log(
    text: str, *, after: tuple[int, int] | None, max_bytes: int
) -> tuple[list[str], tuple[int, int] | None]:
    """Lines of a ``timestamps=true`` pod log that follow the cursor position ``after`` (at most
    about ``max_bytes``, at least one line), without their timestamps, and the new position.
    A last line without its newline (cut by ``limitBytes``) is left for the next read."""
    last_ns, same = after if after is not None else (-1, 0)
    seen_at_last = 0
    lines: list[str] = []
    size = 0
    position = after
    for raw in text.splitlines(keepends=True):
        stamp, _, body = raw.partition(" ")
        ns = log_time_ns(stamp)
        if ns is None or not raw.endswith("\n"):
            break
        if ns < last_ns:
            continue
        if ns == last_ns:
            seen_at_last += 1
            if seen_at_last <= same:
                continue
        if lines and size + len(body.encode()) > max_bytes:
            break
        position = (ns, position[1] + 1) if position and ns == position[0] else (ns, 1)
        lines.append(body)
        size += len(body.encode())
    return lines, position


# --------------------------------------------------------------------------- egress


def egress_cidrs_error(value: object) -> str | None:
    """Why ``value`` is not a list of address blocks for ``egress_denied_cidrs`` (IPv4 or IPv6
    networks in CIDR form, no host bits set: a NetworkPolicy's ``except`` holds networks);
    None when it is one."""
    if isinstance(value, str):
        return "egress_denied_cidrs must be a list of CIDR blocks, not a string"
    if not isinstance(value, Sequence):
        return "egress_denied_cidrs must be a list of CIDR blocks"
    for item in value:
        if not isinstance(item, str):
            return f"egress_denied_cidrs: {item!r} is not a CIDR block"
        try:
            ipaddress.ip_network(item, strict=True)
        except ValueError as exc:
            return f"egress_denied_cidrs: {item!r} is not a CIDR block ({exc})"
    return None
