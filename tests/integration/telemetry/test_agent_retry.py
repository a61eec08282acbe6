"""The node agent retrying against a live platform: a batch the platform stored but whose answer
never reached the agent is sent again unchanged, so the platform recognises the repeat and
stores its samples, and its XID, once."""

from __future__ import annotations

import threading
import time
import urllib.error
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from gpuagent.agent import SampleBuffer, Sender
from telemetry.models import GpuErrorEvent, GpuSample

from .conftest import make_sample

SENDER_TIMEOUT_S = 0.5


class LosingProxy:
    """Forwards each POST to the platform; the first answer is withheld until the agent has
    given up on it (what a dropped connection or a slow load balancer does)."""

    def __init__(self, upstream: str):
        self.bodies: list[bytes] = []
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802 (http.server's API)
                body = self.rfile.read(int(self.headers["Content-Length"]))
                proxy.bodies.append(body)
                first = len(proxy.bodies) == 1
                request = urllib.request.Request(
                    upstream + self.path,
                    data=body,
                    method="POST",
                    headers={
                        "Content-Type": "application/json",
                        "Authorization": self.headers["Authorization"],
                    },
                )
                try:
                    with urllib.request.urlopen(request, timeout=10) as answer:
                        status, text = answer.status, answer.read()
                except urllib.error.HTTPError as exc:
                    status, text = exc.code, exc.read()
                if first:
                    time.sleep(SENDER_TIMEOUT_S * 2)  # stored upstream; the agent hears nothing
                    return
                self.send_response(status)
                self.send_header("Content-Length", str(len(text)))
                self.end_headers()
                self.wfile.write(text)

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


def test_a_batch_whose_answer_was_lost_is_stored_once(node1, agent_token, live_server):
    proxy = LosingProxy(live_server.url)
    try:
        buffer = SampleBuffer(capacity=100)
        sender = Sender(
            proxy.url, agent_token, buffer, timeout=SENDER_TIMEOUT_S, sleep=lambda s: None
        )
        # XID 94 (contained ECC error) is counted by the health rules but is not critical.
        buffer.extend([make_sample(gpu=0, xid=[94]), make_sample(gpu=1)])
        assert sender.send_once() is False  # the platform stored it; the agent cannot know
        sender.timeout = 30.0  # the answers that follow reach it, however busy the machine
        buffer.extend([make_sample(gpu=2)])  # sampling goes on while the agent backs off
        for _ in range(3):  # at most one batch per sample left
            if len(buffer):
                assert sender.send_once() is True
        assert len(buffer) == 0
    finally:
        proxy.close()

    assert sorted(GpuSample.objects.filter(node=node1).values_list("gpu_index", flat=True)) == [
        0,
        1,
        2,
    ]
    assert GpuErrorEvent.objects.filter(node=node1, kind="xid").count() == 1
    assert len(proxy.bodies) == 3
    assert proxy.bodies[1] == proxy.bodies[0]
