"""Django's SMTP email backend with one deadline for a whole delivery.

Django hands its timeout to the socket, where it bounds each read and write: a server that
answers one byte at a time, each within the timeout, keeps the worker (the one that also runs
the scheduling loop) for as long as it likes. Here the connect, every command, every read of a
reply and the QUIT end by ``timeout`` seconds after the connection was opened, as webhook
deliveries do (``notifications.targets``). A delivery cut off fails with an error that names
the deadline (smtplib wraps it in ``SMTPServerDisconnected`` when it comes during a reply); the
caller records it as a failed attempt and retries with backoff.
"""

from __future__ import annotations

import io
import smtplib
import socket
import time
from typing import TYPE_CHECKING, Any

from django.core.mail.backends.smtp import EmailBackend

if TYPE_CHECKING:
    from _typeshed import ReadableBuffer, WriteableBuffer


class _Deadline:
    def __init__(self, seconds: float | None) -> None:
        self.seconds = seconds
        self.at = None if seconds is None else time.monotonic() + seconds

    def expired(self) -> TimeoutError:
        return TimeoutError(
            f"the SMTP server took longer than the delivery's deadline ({self.seconds:g} s)"
        )

    def left(self) -> float | None:
        if self.at is None:
            return None
        left = self.at - time.monotonic()
        if left <= 0:
            raise self.expired()
        return left


class _DeadlineReader(io.RawIOBase):
    """The socket read through the deadline: every receive waits only for what is left of it."""

    def __init__(self, sock: socket.socket, deadline: _Deadline) -> None:
        self._sock = sock
        self._deadline = deadline

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: WriteableBuffer) -> int:
        left = self._deadline.left()
        if left is None:
            return self._sock.recv_into(buffer)
        self._sock.settimeout(left)
        try:
            return self._sock.recv_into(buffer)
        except TimeoutError:
            raise self._deadline.expired() from None


class _DeadlineMixin:
    """For ``smtplib.SMTP`` and ``SMTP_SSL``: sets the deadline before connecting, and bounds
    every send and every reply by it (STARTTLS replaces the socket; the next reply reads the new
    one)."""

    sock: socket.socket | None
    file: io.BufferedReader | None

    def __init__(self, *args: Any, timeout: float | None = None, **kwargs: Any) -> None:
        self._deadline = _Deadline(timeout)  # before the connect in smtplib's __init__
        if timeout is not None:
            kwargs["timeout"] = timeout
        super().__init__(*args, **kwargs)

    # timeout: smtplib's default is socket._GLOBAL_DEFAULT_TIMEOUT, an object, not a number.
    def _get_socket(self, host: str, port: int, timeout: object) -> socket.socket:
        left = self._deadline.left()
        if left is not None and (not isinstance(timeout, (int, float)) or left < timeout):
            timeout = left
        # smtplib.SMTP's (private, so untyped), which this mixin is mixed into.
        sock: socket.socket = super()._get_socket(host, port, timeout)  # type: ignore[misc]
        return sock

    def send(self, s: ReadableBuffer | str) -> None:
        try:
            left = self._deadline.left()
        except TimeoutError as exc:
            # what smtplib raises for a connection it can no longer use: Django's close() then
            # drops it quietly, so a deadline passing at QUIT does not fail a delivered message
            raise smtplib.SMTPServerDisconnected(str(exc)) from None
        if left is not None and self.sock is not None:
            # sendall's timeout bounds the whole call (Python 3.5+), so this is the deadline
            self.sock.settimeout(left)
        super().send(s)  # type: ignore[misc]  # smtplib.SMTP's, which this mixin is mixed into

    def getreply(self) -> tuple[int, bytes]:
        if self.file is None and self.sock is not None:
            self.file = io.BufferedReader(_DeadlineReader(self.sock, self._deadline))
        reply: tuple[int, bytes] = super().getreply()  # type: ignore[misc]  # smtplib.SMTP's
        return reply


class _DeadlineSMTP(_DeadlineMixin, smtplib.SMTP):
    pass


class _DeadlineSMTPSSL(_DeadlineMixin, smtplib.SMTP_SSL):
    pass


class DeadlineEmailBackend(EmailBackend):
    """``django.core.mail.backends.smtp.EmailBackend`` whose ``timeout`` bounds a whole
    connection (connect, commands, replies, QUIT) instead of each socket operation."""

    @property
    def connection_class(self) -> type[smtplib.SMTP]:
        return _DeadlineSMTPSSL if self.use_ssl else _DeadlineSMTP
