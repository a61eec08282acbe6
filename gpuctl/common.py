"""What gpuctl's command modules share: the usage error (exit 2), the API client the flags and
the saved login name, and the terminal writers. ``main`` and the command modules (``policy``,
``whatif``, ``session``) import it; it imports none of them."""

from __future__ import annotations

import argparse
import sys
from typing import TextIO, cast

from . import config, output
from .client import Client


class UsageError(Exception):
    """Bad usage detected after parsing (exit 2). ``fields`` names the inputs at fault."""

    def __init__(self, message: str, fields: dict[str, list[str]] | None = None):
        super().__init__(message)
        self.message = message
        self.fields = fields or {}


def whole_number(text: str) -> int | None:
    """``text`` as a number >= 1 when it is one written in ASCII digits, else None. str.isdigit
    alone also takes "²" and other digits int() refuses (a ValueError traceback), and int()
    refuses more than 4,300 digits."""
    if not (text.isascii() and text.isdigit()) or len(text) > 19:
        return None
    value = int(text)
    return value if value >= 1 else None


def client(args: argparse.Namespace) -> Client:
    """A client for the server ``--url`` names, else ``GPUCTL_URL``, else the saved login."""
    settings = config.resolve(url_flag=args.url)
    return Client(settings.url, settings.token)


def out() -> TextIO:
    return cast(TextIO, output.TerminalWriter(sys.stdout))


def err() -> TextIO:
    return cast(TextIO, output.TerminalWriter(sys.stderr))
