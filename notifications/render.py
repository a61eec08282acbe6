"""What a grouped message says, per channel. Pure functions of plain values (no ORM, no clock):
``Line`` items in, subject, email text and webhook bodies out, plus the webhook signature.

Bodies:
- generic: our JSON (``type``, ``id``, ``subject``, ``count``, ``summary`` per event kind,
  ``events`` up to ``MAX_LISTED``), signed per the Standard Webhooks scheme: headers
  ``webhook-id``, ``webhook-timestamp``, ``webhook-signature: v1,<base64 HMAC-SHA256 of
  "id.timestamp.body">`` keyed by the hook's ``whsec_`` secret.
- slack: an incoming-webhook body (``text`` plus ``blocks`` in mrkdwn).
- teams: a Microsoft Teams workflow webhook body (a ``message`` with one Adaptive Card).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
from collections import Counter
from dataclasses import dataclass
from typing import Any

from .events import EventKind

MAX_LISTED = 50  # events listed one by one in a message; the rest are counted


@dataclass(frozen=True)
class Line:
    kind: str
    title: str
    detail: str
    url: str
    team: str
    time: str  # ISO 8601
    job: int | None = None


# By the kind as a line carries it (a str; EventKind members are equal to their values).
_PLURAL: dict[str, str] = {
    EventKind.JOB_SUCCEEDED: "jobs finished",
    EventKind.JOB_FAILED: "jobs failed",
    EventKind.JOB_PREEMPTED: "jobs preempted",
    EventKind.JOB_REQUEUED: "jobs requeued",
    EventKind.JOB_IDLE: "jobs idle",
    EventKind.BUDGET_THRESHOLD: "budget thresholds reached",
    EventKind.BUDGET_HARD_STOP: "budget hard stops",
    EventKind.QUOTA_DECIDED: "quota requests decided",
    EventKind.NODE_QUARANTINED: "nodes quarantined",
    EventKind.NODE_RELEASED: "nodes released",
    EventKind.TEST: "test messages",
}


_ORDER = {kind.value: n for n, kind in enumerate(EventKind)}


def summary(lines: list[Line]) -> dict[str, int]:
    """Events per kind, kinds in a fixed order (finished before failed, and so on)."""
    counts = Counter(line.kind for line in lines)
    return dict(sorted(counts.items(), key=lambda item: _ORDER.get(item[0], len(_ORDER))))


def subject(lines: list[Line], *, array_name: str = "") -> str:
    """One line saying what the message is about: the single event's title, an array's
    outcome, or a count per kind."""
    if len(lines) == 1:
        return lines[0].title
    counts = summary(lines)
    parts = ", ".join(f"{n} {_PLURAL.get(kind, kind)}" for kind, n in counts.items())
    if array_name:
        return f"Job array {array_name}: {parts}"
    return f"{len(lines)} notifications: {parts}"


def email_text(lines: list[Line], *, heading: str, settings_url: str) -> str:
    out = [heading, ""]
    for line in lines[:MAX_LISTED]:
        out.append(f"- {line.title}" + (f": {line.detail}" if line.detail else ""))
        if line.url:
            out.append(f"  {line.url}")
    if len(lines) > MAX_LISTED:
        out.append(f"… and {len(lines) - MAX_LISTED} more")
    out += ["", f"Choose what you are told, and how: {settings_url}"]
    return "\n".join(out) + "\n"


def generic_body(
    lines: list[Line], *, message_id: str, heading: str, sent_at: str
) -> dict[str, Any]:
    return {
        "type": "notification",
        "id": message_id,
        "subject": heading,
        "count": len(lines),
        "summary": summary(lines),
        "events": [
            {
                "kind": line.kind,
                "title": line.title,
                "detail": line.detail,
                "team": line.team,
                "job": line.job,
                "url": line.url,
                "time": line.time,
            }
            for line in lines[:MAX_LISTED]
        ],
        "truncated": len(lines) > MAX_LISTED,
        "time": sent_at,
    }


def _escape_mrkdwn(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def slack_body(lines: list[Line], *, heading: str) -> dict[str, Any]:
    items = []
    for line in lines[:MAX_LISTED]:
        title = _escape_mrkdwn(line.title)
        text = f"<{line.url}|{title}>" if line.url else title
        if line.detail:
            text += f" — {_escape_mrkdwn(line.detail)}"
        items.append(f"• {text}")
    if len(lines) > MAX_LISTED:
        items.append(f"… and {len(lines) - MAX_LISTED} more")
    blocks: list[dict[str, Any]] = [
        {"type": "section", "text": {"type": "mrkdwn", "text": f"*{_escape_mrkdwn(heading)}*"}}
    ]
    # Slack caps a section's text at 3000 characters: chunk the list.
    chunk: list[str] = []
    for item in items:
        if sum(len(i) + 1 for i in chunk) + len(item) > 2900:
            blocks.append({"type": "section", "text": {"type": "mrkdwn", "text": "\n".join(chunk)}})
            chunk = []
        chunk.append(item)
    if chunk:
        blocks.append({"type": "section", "text": {"type": "mrkdwn", "text": "\n".join(chunk)}})
    # Slack reads ``text`` as mrkdwn too (it is the notification shown on phones and in the
    # sidebar): unescaped, a job named "<!channel>" would page the whole channel.
    return {"text": _escape_mrkdwn(heading), "blocks": blocks[:50]}


def teams_body(lines: list[Line], *, heading: str) -> dict[str, Any]:
    """An Adaptive Card. User text (job, array and team names) goes in TextRuns, which render no
    markdown: in a TextBlock a job named ``x](https://evil) [y`` became a link of its owner's
    choosing, and ``**`` or a list marker reshaped the card."""
    body: list[dict[str, Any]] = [
        _rich_text(
            {"type": "TextRun", "text": heading, "weight": "Bolder", "size": "Medium"},
        )
    ]
    for line in lines[:MAX_LISTED]:
        title: dict[str, Any] = {"type": "TextRun", "text": line.title}
        if line.url:
            title["selectAction"] = {"type": "Action.OpenUrl", "url": line.url}
            title["color"] = "Accent"
        detail = [{"type": "TextRun", "text": f" — {line.detail}"}] if line.detail else []
        body.append({**_rich_text(title, *detail), "spacing": "Small"})
    if len(lines) > MAX_LISTED:
        body.append({"type": "TextBlock", "text": f"… and {len(lines) - MAX_LISTED} more"})
    return {
        "type": "message",
        "attachments": [
            {
                "contentType": "application/vnd.microsoft.card.adaptive",
                "contentUrl": None,
                "content": {
                    "$schema": "http://adaptivecards.io/schemas/adaptive-card.json",
                    "type": "AdaptiveCard",
                    "version": "1.4",
                    "body": body,
                },
            }
        ],
    }


def _rich_text(*runs: dict[str, Any]) -> dict[str, Any]:
    return {"type": "RichTextBlock", "inlines": list(runs)}


def encode(body: dict[str, Any]) -> bytes:
    return json.dumps(body, separators=(",", ":"), ensure_ascii=False).encode()


def signature(*, secret: str, message_id: str, timestamp: int, content: bytes) -> str:
    """The Standard Webhooks ``webhook-signature`` value for ``content``."""
    key = base64.b64decode(secret.removeprefix("whsec_"))
    signed = f"{message_id}.{timestamp}.".encode() + content
    digest = hmac.new(key, signed, hashlib.sha256).digest()
    return "v1," + base64.b64encode(digest).decode()


def signed_headers(
    *, secret: str, message_id: str, timestamp: int, content: bytes
) -> dict[str, str]:
    return {
        "Content-Type": "application/json",
        "User-Agent": "gpuplatform-webhooks/1",
        "webhook-id": message_id,
        "webhook-timestamp": str(timestamp),
        "webhook-signature": signature(
            secret=secret, message_id=message_id, timestamp=timestamp, content=content
        ),
    }
