"""Real counterparts for notification tests: an SMTP server (aiosmtpd) and an HTTP receiver
that checks each webhook's Standard Webhooks signature with the `standardwebhooks` library
(not our own code), both started by the test on free local ports.

The dispatcher and the delivery are driven here the way the Celery tasks drive them
(``notifications.tasks``): one dispatch pass, then one delivery per claimed message, with the
clock passed in so retries and grouping windows can be walked through without sleeping.
"""

from __future__ import annotations

import json
import socket
import threading
import time
from datetime import timedelta
from email import message_from_bytes
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from django.utils import timezone

from tests.integration.roles import vera  # noqa: F401


class SmtpInbox:
    """Messages a real SMTP server (aiosmtpd) accepted."""

    def __init__(self):
        self.messages: list = []
        # address -> the reply its RCPT TO gets instead of 250 (a relay refusing a recipient)
        self.refuse: dict[str, str] = {}
        self.rcpt_attempts = 0

    async def handle_RCPT(self, server, session, envelope, address, rcpt_options):  # noqa: N802
        self.rcpt_attempts += 1
        if address in self.refuse:
            return self.refuse[address]
        envelope.rcpt_tos.append(address)
        return "250 OK"

    async def handle_DATA(self, server, session, envelope):  # noqa: N802 (aiosmtpd's API)
        message = message_from_bytes(envelope.content)
        self.messages.append(
            {
                "from": envelope.mail_from,
                "to": list(envelope.rcpt_tos),
                "subject": message["Subject"],
                "body": message.get_payload(decode=True).decode(),
                "message": message,
            }
        )
        return "250 OK"


@pytest.fixture
def smtp(settings):
    from aiosmtpd.controller import Controller

    inbox = SmtpInbox()
    with socket.socket() as probe:  # aiosmtpd checks readiness by connecting: no port 0
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    controller = Controller(inbox, hostname="127.0.0.1", port=port)
    controller.start()
    settings.EMAIL_BACKEND = "notifications.smtp.DeadlineEmailBackend"
    settings.EMAIL_HOST = "127.0.0.1"
    settings.EMAIL_PORT = port
    settings.EMAIL_USE_TLS = settings.EMAIL_USE_SSL = False
    settings.EMAIL_HOST_USER = settings.EMAIL_HOST_PASSWORD = ""
    yield inbox
    controller.stop()


class Receiver:
    """A local HTTP endpoint: answers each POST with the next scripted status (200 when the
    script is used up), records it, and verifies its signature with ``secret``. ``delay``
    seconds pass before each answer (a slow receiver); ``location`` is sent with a 3xx. With
    ``drip_s`` the answer goes out one byte every ``drip_s`` seconds (each read is quick, the
    whole answer is not); with ``endless`` its body never ends (for up to 30 s), and
    ``sent_bytes`` counts what the platform took of it."""

    def __init__(self, host: str = "127.0.0.1", port: int = 0):
        self.requests: list[dict] = []
        self.script: list[int] = []
        self.secret = ""
        self.delay = 0.0
        self.location = ""
        self.drip_s = 0.0
        self.endless = False
        self.sent_bytes = 0
        # Called (in the server's thread) after a request is recorded, before it is answered:
        # what happens elsewhere while a delivery waits for its answer.
        self.meanwhile = None
        self._server = ThreadingHTTPServer((host, port), self._handler())
        self.port = self._server.server_address[1]
        self.url = f"http://{host}:{self.port}/hook"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    def _handler(self):
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802 (http.server's API)
                from standardwebhooks import Webhook, WebhookVerificationError

                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                headers = {k.lower(): v for k, v in self.headers.items()}
                verified = None  # no secret given: a Slack or Teams endpoint does not check
                if receiver.secret:
                    try:
                        Webhook(receiver.secret).verify(body, headers)
                        verified = True
                    except WebhookVerificationError:
                        verified = False
                status = receiver.script.pop(0) if receiver.script else 200
                receiver.requests.append(
                    {
                        "path": self.path,
                        "headers": headers,
                        "body": body,
                        "json": json.loads(body),
                        "verified": verified,
                        "answered": status,
                    }
                )
                if receiver.meanwhile is not None:
                    receiver.meanwhile()
                time.sleep(receiver.delay)
                if receiver.drip_s:
                    self._drip(status)
                    return
                if receiver.endless:
                    self._endless(status)
                    return
                self.send_response(status)
                if receiver.location and 300 <= status < 400:
                    self.send_header("Location", receiver.location)
                self.send_header("Content-Type", "text/plain")
                self.end_headers()
                self.wfile.write(b"ok" if status < 300 else b"receiver is down")

            def _drip(self, status: int) -> None:
                answer = f"HTTP/1.1 {status} OK\r\nX-Padding: {'a' * 200}\r\n\r\n".encode()
                for byte in answer:
                    try:
                        self.wfile.write(bytes([byte]))
                    except OSError:  # the platform gave up: what a receiver sees
                        return
                    time.sleep(receiver.drip_s)

            def _endless(self, status: int) -> None:
                self.send_response(status)
                self.send_header("Content-Type", "text/plain")
                self.end_headers()  # no length: the body ends when the connection does
                chunk, until = b"x" * 65536, time.monotonic() + 30
                while time.monotonic() < until:
                    try:
                        self.wfile.write(chunk)
                    except OSError:
                        return
                    receiver.sent_bytes += len(chunk)

            def log_message(self, *args):
                pass

        return Handler

    def close(self):
        self._server.shutdown()
        self._server.server_close()


@pytest.fixture
def receiver():
    server = Receiver()
    yield server
    server.close()


@pytest.fixture
def notify_settings(settings):
    settings.NOTIFY_GROUP_WINDOW_SECONDS = 60
    settings.NOTIFY_RETRY_BASE_SECONDS = 30
    settings.NOTIFY_MAX_ATTEMPTS = 5
    settings.NOTIFY_WEBHOOK_DISABLE_AFTER = 5
    settings.NOTIFY_WEBHOOK_TIMEOUT_SECONDS = 5
    settings.PORTAL_URL = "https://gpus.example.com"
    return settings


@pytest.fixture
def alice_mail(platform):
    alice = platform["alice"]
    alice.email = "alice@example.com"
    alice.save()
    return alice


def running_job(user, name="train", team="vision"):
    from scheduler.models import Job
    from scheduler.services import JobRequest, job_submit
    from scheduler.states import JobState

    job = job_submit(
        user=user, request=JobRequest(name=name, team=team, workers=1, gpus_per_worker=1)
    )
    Job.objects.filter(pk=job.pk).update(state=JobState.RUNNING, started_at=timezone.now())
    job.refresh_from_db()
    return job


def team_hook(admin, receiver, **extra):
    """A vision webhook on the local receiver (loopback: a platform admin allows it)."""
    from notifications import services

    hook = services.webhook_create(
        user=admin,
        team="vision",
        name="vision-alerts",
        url=receiver.url,
        allow_private_network=True,
        **extra,
    )
    receiver.secret = hook.secret
    return hook


def run_dispatch(now=None) -> list[str]:
    """One dispatcher pass, then each claimed message delivered (what the Celery tasks do);
    returns the messages' new statuses."""
    from notifications.delivery import message_deliver
    from notifications.dispatch import notifications_dispatch

    now = now or timezone.now()
    result = notifications_dispatch(now=now)
    assert result.ran
    return [message_deliver(message_id=pk, now=now) for pk in result.claimed]


def after_window(seconds: float = 61):
    return timezone.now() + timedelta(seconds=seconds)
