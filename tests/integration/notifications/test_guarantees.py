"""What organisations expect of notification delivery, on real counterparts (aiosmtpd, a local
HTTP receiver): at-least-once delivery whose repeats carry the identity a receiver dedupes on;
no redirect and no second DNS answer can turn a webhook toward the platform's network; the
documented signature recipe verifies a real delivery and refuses a replay; emails carry the
headers mail systems act on and encode non-ASCII names; a person who left the team, or was
deactivated, before delivery is not told; a storm of failures is one message per window."""

from __future__ import annotations

import http.server
import re
import socket
import ssl
import subprocess
import threading
import time
from datetime import timedelta
from email.header import decode_header, make_header
from pathlib import Path

import httpcore
import httpx
import pytest
from django.utils import timezone

from notifications import delivery, services, targets
from notifications.delivery import message_deliver
from notifications.dispatch import notifications_dispatch
from notifications.models import DeliveryAttempt, Message, Webhook
from scheduler.models import Job
from scheduler.states import JobState
from scheduler.transitions import job_finish
from tenants.models import Membership
from tenants.teams import membership_remove

from .conftest import Receiver, after_window, run_dispatch, running_job, team_hook

pytestmark = pytest.mark.django_db

DOCS = Path(__file__).resolve().parents[3] / "docs" / "tenancy.md"


def _fail(jobs, capture) -> None:
    with capture(execute=True):
        for job in jobs:
            job_finish(job=job, target=JobState.FAILED, now=timezone.now(), exit_code=1)


class WorkerDied(Exception):
    """Stands for a worker killed between the send and its record."""


def test_a_worker_dying_after_the_send_resends_under_the_same_identity(
    platform,
    alice_mail,
    smtp,
    receiver,
    notify_settings,
    monkeypatch,
    django_capture_on_commit_callbacks,
):
    """Delivery is at-least-once: the platform cannot know whether a send it never recorded
    arrived, so it sends again. The repeat is the same email Message-ID and the same
    ``webhook-id``, which is what mail systems and receivers dedupe on."""
    team_hook(platform["admin"], receiver)
    _fail([running_job(alice_mail)], django_capture_on_commit_callbacks)
    now = after_window()

    def die(*args, **kwargs):
        raise WorkerDied

    record = delivery._record
    monkeypatch.setattr(delivery, "_record", die)
    claimed = notifications_dispatch(now=now).claimed
    assert len(claimed) == 2
    for pk in claimed:
        with pytest.raises(WorkerDied):
            message_deliver(message_id=pk, now=now)
    monkeypatch.setattr(delivery, "_record", record)
    assert len(smtp.messages) == 1 and len(receiver.requests) == 1
    assert set(Message.objects.values_list("status", flat=True)) == {"sending"}

    assert run_dispatch(now + timedelta(minutes=5)) == []  # the worker may still be at it
    assert run_dispatch(now + timedelta(minutes=11)) == ["delivered", "delivered"]
    first, again = smtp.messages
    assert first["message"]["Message-ID"] == again["message"]["Message-ID"]
    one, two = receiver.requests
    assert one["headers"]["webhook-id"] == two["headers"]["webhook-id"]
    assert two["verified"]


def test_a_receiver_slower_than_the_timeout_gets_the_retry_under_the_same_id(
    platform, receiver, notify_settings, django_capture_on_commit_callbacks
):
    notify_settings.NOTIFY_WEBHOOK_TIMEOUT_SECONDS = 1
    team_hook(platform["admin"], receiver)
    receiver.delay = 2  # it takes the request, and answers after we gave up
    _fail([running_job(platform["alice"])], django_capture_on_commit_callbacks)
    assert run_dispatch(after_window()) == ["queued"]
    assert "ReadTimeout" in DeliveryAttempt.objects.get().error

    receiver.delay = 0
    assert run_dispatch(Message.objects.get().next_attempt_at) == ["delivered"]
    slow, retry = receiver.requests
    assert slow["verified"] and retry["verified"]
    assert slow["headers"]["webhook-id"] == retry["headers"]["webhook-id"]


def test_a_receiver_answering_a_byte_at_a_time_is_cut_off_at_the_deadline(
    platform, receiver, notify_settings, django_capture_on_commit_callbacks
):
    """Each byte comes well within the timeout, the whole answer would take a minute: a hook
    owner's receiver must not hold a worker (the one running every team's scheduling too)."""
    notify_settings.NOTIFY_WEBHOOK_TIMEOUT_SECONDS = 1
    team_hook(platform["admin"], receiver)
    receiver.drip_s = 0.25
    _fail([running_job(platform["alice"])], django_capture_on_commit_callbacks)
    started = time.monotonic()
    assert run_dispatch(after_window()) == ["queued"]
    assert time.monotonic() - started < 10  # the whole answer would take over 60 s
    assert "ReadTimeout" in DeliveryAttempt.objects.get().error


def _self_signed(directory: Path, name: str, alt_name: str) -> tuple[Path, Path]:
    """A certificate (made with openssl) for `name`, and its key."""
    cert, key = directory / "cert.pem", directory / "key.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
         "-keyout", str(key), "-out", str(cert), "-subj", f"/CN={name}",
         "-addext", f"subjectAltName={alt_name}"],
        check=True, capture_output=True,
    )  # fmt: skip
    return cert, key


class DrippingSmtpServer:
    """A local SMTP server that speaks the protocol correctly but sends every reply one byte
    every ``drip_s`` seconds: each read is quick, the conversation is not (over a minute)."""

    REPLIES = {b"EHLO": b"250 slow.example.test", b"HELO": b"250 slow.example.test"}

    def __init__(self, drip_s: float) -> None:
        self.drip_s = drip_s
        self.stopped = threading.Event()
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _drip(self, conn: socket.socket, line: bytes) -> None:
        for byte in line + b"\r\n":
            if self.stopped.wait(self.drip_s):
                raise ConnectionAbortedError("stopped")
            conn.sendall(bytes([byte]))

    def _serve(self) -> None:
        try:
            conn, _ = self.listener.accept()
        except OSError:
            return
        with conn, conn.makefile("rb") as lines:
            try:
                self._drip(conn, b"220 slow.example.test ESMTP")
                for line in lines:
                    verb = line[:4].upper()
                    if verb == b"DATA":
                        self._drip(conn, b"354 go ahead")
                        for body_line in lines:
                            if body_line == b".\r\n":
                                break
                        self._drip(conn, b"250 queued")
                    elif verb == b"QUIT":
                        self._drip(conn, b"221 bye")
                        return
                    else:
                        self._drip(conn, self.REPLIES.get(verb, b"250 ok"))
            except OSError:
                return  # the platform hung up, or the test ended

    def stop(self) -> None:
        self.stopped.set()
        self.listener.close()
        self.thread.join(timeout=5)


@pytest.fixture
def dripping_smtp(settings):
    server = DrippingSmtpServer(drip_s=0.25)
    settings.EMAIL_BACKEND = "notifications.smtp.DeadlineEmailBackend"
    settings.EMAIL_HOST, settings.EMAIL_PORT = "127.0.0.1", server.port
    settings.EMAIL_USE_TLS = settings.EMAIL_USE_SSL = False
    settings.EMAIL_HOST_USER = settings.EMAIL_HOST_PASSWORD = ""
    yield server
    server.stop()


def test_an_smtp_server_answering_a_byte_at_a_time_is_cut_off_at_the_deadline(
    platform, alice_mail, dripping_smtp, notify_settings, django_capture_on_commit_callbacks
):
    """As for webhooks: the timeout bounds the whole SMTP conversation, not each read of it,
    so a relay that trickles its replies cannot hold the worker."""
    notify_settings.NOTIFY_EMAIL_TIMEOUT_SECONDS = 1
    _fail([running_job(alice_mail)], django_capture_on_commit_callbacks)
    started = time.monotonic()
    assert run_dispatch(after_window()) == ["queued"]
    assert time.monotonic() - started < 10  # the conversation would take over a minute
    attempt = DeliveryAttempt.objects.get()
    assert not attempt.ok and "deadline" in attempt.error
    assert Message.objects.get().attempts == 1  # a failed attempt, retried with backoff


def test_a_deadline_passing_after_the_message_was_accepted_does_not_fail_it(smtp):
    """The relay accepted the message; the deadline then passes before QUIT: the send counts
    as done (a failure here would send the message again)."""
    from django.core.mail import EmailMessage, get_connection

    connection = get_connection(timeout=5)
    connection.open()
    sent = connection.send_messages([EmailMessage("s", "b", "a@example.com", ["b@example.com"])])
    connection.connection._deadline.at = time.monotonic() - 1  # as if 5 s had passed
    connection.close()
    assert sent == 1 and len(smtp.messages) == 1


@pytest.mark.parametrize("tls", ["starttls", "implicit"])
def test_email_over_tls_goes_through_the_deadline_backend(
    tls,
    tmp_path,
    settings,
    monkeypatch,
    platform,
    alice_mail,
    notify_settings,
    django_capture_on_commit_callbacks,
):
    """The backend that bounds the conversation still speaks STARTTLS (port 587) and implicit
    TLS (port 465) to a real server (aiosmtpd), with the certificate checked."""
    from aiosmtpd.controller import Controller

    from .conftest import SmtpInbox

    cert, key = _self_signed(tmp_path, "127.0.0.1", "IP:127.0.0.1")
    monkeypatch.setenv("SSL_CERT_FILE", str(cert))  # the platform trusts this server only
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    inbox = SmtpInbox()
    if tls == "starttls":
        controller = Controller(
            inbox, hostname="127.0.0.1", port=port, tls_context=context, require_starttls=True
        )
    else:
        controller = Controller(inbox, hostname="127.0.0.1", port=port, ssl_context=context)
    controller.start()
    try:
        settings.EMAIL_BACKEND = "notifications.smtp.DeadlineEmailBackend"
        settings.EMAIL_HOST, settings.EMAIL_PORT = "127.0.0.1", port
        settings.EMAIL_USE_TLS, settings.EMAIL_USE_SSL = tls == "starttls", tls == "implicit"
        settings.EMAIL_HOST_USER = settings.EMAIL_HOST_PASSWORD = ""
        notify_settings.NOTIFY_EMAIL_TIMEOUT_SECONDS = 5
        _fail([running_job(alice_mail)], django_capture_on_commit_callbacks)
        assert run_dispatch(after_window()) == ["delivered"]
    finally:
        controller.stop()
    [mail] = inbox.messages
    assert mail["to"] == ["alice@example.com"] and "failed" in mail["subject"]


def test_an_endless_answer_is_read_only_as_far_as_its_excerpt(
    platform, receiver, notify_settings, django_capture_on_commit_callbacks
):
    team_hook(platform["admin"], receiver)
    receiver.endless = True  # 200, then a body that does not end
    _fail([running_job(platform["alice"])], django_capture_on_commit_callbacks)
    assert run_dispatch(after_window()) == ["delivered"]
    attempt = DeliveryAttempt.objects.get()
    assert attempt.status_code == 200 and attempt.response_excerpt == "x" * 500
    assert receiver.sent_bytes < 64 * 1024 * 1024  # the platform stopped reading


@pytest.fixture
def tls_receiver(tmp_path):
    """An HTTPS receiver on 127.0.0.1 whose certificate (made here with openssl) names
    hooks.example.test; yields (port, the certificate's file)."""
    cert, key = _self_signed(tmp_path, "hooks.example.test", "DNS:hooks.example.test")

    class Answer(http.server.BaseHTTPRequestHandler):
        def do_POST(self):  # noqa: N802 (http.server's API)
            body = self.rfile.read(int(self.headers["Content-Length"]))
            self.send_response(200)
            self.end_headers()
            self.wfile.write(b"host=" + self.headers["Host"].encode() + b" body=" + body)

        def log_message(self, *args):
            pass

    server = http.server.HTTPServer(("127.0.0.1", 0), Answer)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server.server_address[1], cert
    server.shutdown()
    server.server_close()


def test_https_keeps_the_name_for_the_certificate_check_and_the_host(tls_receiver, monkeypatch):
    """Deliveries go to the checked address but TLS is checked against the hook's host name:
    refused while the certificate's issuer is not trusted, or when it names another host;
    delivered, with the name in SNI and Host, once it is (here: the test's own CA)."""
    port, cert = tls_receiver

    def post(host: str):
        target = targets.Target(f"https://{host}:{port}/hook", "https", host, port, ("127.0.0.1",))
        return targets.pinned_post(target, content=b"{}", headers={}, timeout_s=5)

    with pytest.raises(httpcore.ConnectError, match="self-signed certificate"):
        post("hooks.example.test")
    monkeypatch.setattr(
        httpx, "create_ssl_context", lambda **kw: ssl.create_default_context(cafile=cert)
    )
    reply = post("hooks.example.test")
    assert (reply.status_code, reply.text) == (200, f"host=hooks.example.test:{port} body={{}}")
    with pytest.raises(httpcore.ConnectError, match="Hostname mismatch"):
        post("other.example.test")


@pytest.fixture
def public_receiver(monkeypatch):
    """A receiver on 127.0.0.2 that the target checks take for a public address (a stand-in for
    one on the internet); the rest of 127.0.0.0/8 stays the platform's own network."""
    checked = targets.address_problem
    monkeypatch.setattr(
        targets, "address_problem", lambda a: None if a == "127.0.0.2" else checked(a)
    )
    server = Receiver("127.0.0.2")
    yield server
    server.close()


def _dns(monkeypatch, answer) -> list[str]:
    """The system resolver answers ``hooks.example.test`` with ``answer(n)`` on its n-th lookup
    (from 1), for whoever asks: our checks or the HTTP client. Returns the lookups made."""
    lookups: list[str] = []
    real = socket.getaddrinfo

    def getaddrinfo(host, port, *args, **kwargs):
        if host != "hooks.example.test":
            return real(host, port, *args, **kwargs)
        lookups.append(host)
        return real(answer(len(lookups)), port, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)
    return lookups


def test_a_redirect_is_not_followed_into_the_platforms_network(
    platform, vera, public_receiver, receiver, notify_settings, monkeypatch
):
    _dns(monkeypatch, lambda n: "127.0.0.2")
    hook = services.webhook_create(
        user=vera,
        team="vision",
        name="redirecting",
        url=f"http://hooks.example.test:{public_receiver.port}/hook",
    )
    public_receiver.secret = hook.secret
    public_receiver.script = [307]  # 307 keeps the method and body: the worst case
    public_receiver.location = receiver.url
    services.webhook_send_test(user=vera, webhook_id=hook.pk)
    assert run_dispatch() == ["queued"]
    assert len(public_receiver.requests) == 1 and public_receiver.requests[0]["verified"]
    assert receiver.requests == []
    attempt = DeliveryAttempt.objects.get()
    assert (attempt.ok, attempt.status_code) == (False, 307)
    assert attempt.error == "HTTP 307 from hooks.example.test"


def test_the_connection_goes_to_the_address_that_was_checked(
    platform, vera, public_receiver, notify_settings, monkeypatch
):
    """DNS rebinding within one delivery: the name answers a public address to the check, then
    the platform's own address to any later lookup. The HTTP client must not look it up again."""
    internal = Receiver("127.0.0.1", port=public_receiver.port)
    try:
        lookups = _dns(monkeypatch, lambda n: "127.0.0.2" if n <= 2 else "127.0.0.1")
        hook = services.webhook_create(
            user=vera,
            team="vision",
            name="rebinding",
            url=f"http://hooks.example.test:{public_receiver.port}/hook",
        )
        public_receiver.secret = hook.secret
        services.webhook_send_test(user=vera, webhook_id=hook.pk)
        assert run_dispatch() == ["delivered"]
        assert len(lookups) == 2  # saving, then checking at delivery; never the client
        assert internal.requests == []
        [request] = public_receiver.requests
        assert request["verified"] and request["headers"]["host"] == (
            f"hooks.example.test:{public_receiver.port}"
        )
    finally:
        internal.close()


def _documented_verify():
    """The verification recipe of docs/tenancy.md, run as it is printed."""
    text = DOCS.read_text()
    match = re.search(r"```python\n(.*?def verify\(.*?)```", text, re.S)
    assert match, "docs/tenancy.md shows no `def verify(` recipe for webhook signatures"
    namespace: dict = {}
    exec(match.group(1), namespace)  # noqa: S102 (our own documentation)
    return namespace["verify"]


def test_the_documented_recipe_verifies_a_real_delivery_and_refuses_a_replay(
    platform, receiver, notify_settings, django_capture_on_commit_callbacks
):
    verify = _documented_verify()
    hook = team_hook(platform["admin"], receiver)
    job = running_job(platform["alice"], name="Обучение")  # non-ASCII: raw bytes are signed
    _fail([job], django_capture_on_commit_callbacks)
    assert run_dispatch(after_window()) == ["delivered"]
    [request] = receiver.requests
    headers, body = request["headers"], request["body"]

    assert verify(hook.secret, headers, body) is True
    assert verify(hook.secret, headers, body.replace(b"failed", b"passed")) is False
    assert verify("whsec_" + "A" * 32, headers, body) is False  # another hook's secret
    # The timestamp is signed: the same request played back ten minutes later is refused,
    # and moving its timestamp forward breaks the signature.
    sent = int(headers["webhook-timestamp"])
    assert verify(hook.secret, headers, body, now=sent + 600) is False
    moved = {**headers, "webhook-timestamp": str(sent + 600)}
    assert verify(hook.secret, moved, body, now=sent + 600) is False


def test_email_carries_the_headers_mail_systems_act_on(
    platform,
    alice_mail,
    smtp,
    notify_settings,
    django_capture_on_commit_callbacks,
):
    _fail([running_job(alice_mail)], django_capture_on_commit_callbacks)
    assert run_dispatch(after_window()) == ["delivered"]
    [mail] = smtp.messages
    headers = mail["message"]
    # Auto-responders (vacation replies, Exchange's out-of-office) stay quiet.
    assert headers["Auto-Submitted"] == "auto-generated"
    assert headers["X-Auto-Response-Suppress"] == "All"
    # Mail clients offer "unsubscribe": it leads to the person's notification settings.
    assert headers["List-Unsubscribe"] == "<https://gpus.example.com/notifications/settings/>"
    assert re.fullmatch(r"<[^<>@\s]+@[^<>@\s]+>", headers["Message-ID"])
    assert headers["Date"]


def test_non_ascii_names_are_encoded_in_subject_and_body(
    platform,
    alice_mail,
    smtp,
    notify_settings,
    django_capture_on_commit_callbacks,
):
    name = "Обучение-模型 été"
    job = running_job(alice_mail, name=name)
    _fail([job], django_capture_on_commit_callbacks)
    assert run_dispatch(after_window()) == ["delivered"]
    [mail] = smtp.messages
    assert mail["subject"].isascii() and "=?utf-8?" in mail["subject"].lower()  # RFC 2047
    subject = str(make_header(decode_header(mail["subject"])))
    assert subject == f"[gpuplatform] Job {name} (#{job.pk}) failed"
    assert name in mail["body"]


@pytest.mark.parametrize("change", ["left the team", "was deactivated"])
def test_a_person_who_left_or_was_deactivated_before_delivery_is_not_told(
    change,
    platform,
    teams,
    alice_mail,
    smtp,
    receiver,
    notify_settings,
    django_capture_on_commit_callbacks,
):
    Webhook.objects.create(
        owner=alice_mail, name="alice-dm", url=receiver.url, allow_private_network=True
    )
    _fail([running_job(alice_mail)], django_capture_on_commit_callbacks)
    assert run_dispatch() == []  # her email and her own webhook are collecting
    assert Message.objects.filter(status="collecting").count() == 2

    if change == "left the team":
        membership_remove(user=platform["admin"], team=teams["vision"], username="alice")
    else:
        alice_mail.is_active = False
        alice_mail.save()
    assert run_dispatch(after_window()) == ["dropped", "dropped"]
    assert smtp.messages == [] and receiver.requests == []


def test_a_grouped_email_keeps_only_the_teams_its_reader_still_belongs_to(
    platform,
    teams,
    alice_mail,
    smtp,
    notify_settings,
    django_capture_on_commit_callbacks,
):
    Membership.objects.create(user=alice_mail, team=teams["nlp"], role="member")
    seg = running_job(alice_mail, name="segmenter", team="vision")
    lm = running_job(alice_mail, name="language-model", team="nlp")
    _fail([seg, lm], django_capture_on_commit_callbacks)
    assert run_dispatch() == []
    membership_remove(user=platform["admin"], team=teams["vision"], username="alice")

    assert run_dispatch(after_window()) == ["delivered"]
    [mail] = smtp.messages
    assert mail["subject"] == f"[gpuplatform] Job language-model (#{lm.pk}) failed"
    assert "segmenter" not in mail["body"] and "vision" not in mail["body"]
    assert Message.objects.get().event_count == 1


def test_five_hundred_jobs_failing_at_once_are_one_message_per_target(
    platform,
    alice_mail,
    smtp,
    receiver,
    notify_settings,
    django_capture_on_commit_callbacks,
):
    """Not an array: 500 separate jobs failing together (a bad image, a lost filesystem) are
    grouped by the window, so alice gets one email and the team's webhook one call."""
    team_hook(platform["admin"], receiver)
    now = timezone.now()
    priority = Job._meta.get_field("priority_class").related_model.objects.first()
    team = alice_mail.memberships.get().team
    jobs = Job.objects.bulk_create(
        Job(
            team=team,
            submitter=alice_mail,
            name=f"job-{i}",
            workers=1,
            gpus_per_worker=1,
            priority_class=priority,
            submitted_at=now,
            started_at=now,
            state=JobState.RUNNING,
        )
        for i in range(500)
    )
    started = time.monotonic()
    _fail(jobs, django_capture_on_commit_callbacks)
    assert run_dispatch() == []
    assert sorted(run_dispatch(after_window())) == ["delivered", "delivered"]
    assert time.monotonic() - started < 120

    [mail] = smtp.messages
    assert mail["subject"] == "[gpuplatform] 500 notifications: 500 jobs failed"
    assert "… and 450 more" in mail["body"]
    [request] = receiver.requests
    assert request["json"]["summary"] == {"job.failed": 500} and request["verified"]


def test_a_job_name_with_a_line_break_still_reaches_its_submitter(
    platform,
    alice_mail,
    smtp,
    notify_settings,
    django_capture_on_commit_callbacks,
):
    """A header cannot hold a line break (Django refuses it, against header injection): the
    subject of a job named across two lines is folded onto one, not an error each attempt.
    Submissions refuse such names now (core.names); a job stored before that still has one."""
    job = running_job(alice_mail)
    Job.objects.filter(pk=job.pk).update(name="sweep\r\nBcc: mallory@example.com")
    _fail([job], django_capture_on_commit_callbacks)
    assert run_dispatch(after_window()) == ["delivered"]
    [mail] = smtp.messages
    assert mail["to"] == ["alice@example.com"]
    assert mail["message"]["Bcc"] is None
    assert mail["subject"] == (
        f"[gpuplatform] Job sweep Bcc: mallory@example.com (#{job.pk}) failed"
    )


@pytest.mark.parametrize(
    "reply, status",
    [("550 5.1.1 <alice@example.com>: no such user", "failed"), ("451 4.7.1 try later", "queued")],
    ids=["550-for-good", "451-try-later"],
)
def test_a_recipient_the_relay_refuses_for_good_is_not_retried(
    platform,
    alice_mail,
    smtp,
    notify_settings,
    django_capture_on_commit_callbacks,
    reply,
    status,
):
    """A relay answering RCPT TO with 550 (no such mailbox) says the same at every attempt: the
    message was sent four more times over eight minutes, to a relay that counts such refusals
    against the sender. A 5xx fails the message at once, saying why; a 4xx is retried."""
    smtp.refuse["alice@example.com"] = reply
    _fail([running_job(alice_mail)], django_capture_on_commit_callbacks)
    assert run_dispatch(after_window()) == [status]
    message = Message.objects.get()
    assert (message.status, message.attempts, smtp.rcpt_attempts) == (status, 1, 1)
    assert reply.split()[0] in message.last_error
    assert smtp.messages == []
    if status == "failed":
        assert message.next_attempt_at is None
        later = timezone.now() + timedelta(hours=2)
        assert run_dispatch(later) == [] and smtp.rcpt_attempts == 1
