"""The node agent, against a real local HTTP server: no Django import, bounded buffer that drops
the oldest and counts it, retries with capped jittered backoff, invalid batches not resent."""

from __future__ import annotations

import json
import random
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from gpuagent.agent import Agent, SampleBuffer, Sender, SimulatedSource, open_source

ROOT = Path(__file__).resolve().parents[3]


class Platform:
    """A stand-in platform: answers each POST with the next scripted status (then 202)."""

    def __init__(self, statuses=()):
        self.statuses = list(statuses)
        self.received: list[dict] = []
        self.headers: list[dict] = []
        platform = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                body = self.rfile.read(int(self.headers["Content-Length"]))
                platform.headers.append(dict(self.headers))
                status = platform.statuses.pop(0) if platform.statuses else 202
                if status == 202:
                    platform.received.append(json.loads(body))
                self.send_response(status)
                self.send_header("Content-Length", "2")
                self.end_headers()
                self.wfile.write(b"{}")

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def platform():
    p = Platform()
    yield p
    p.close()


def test_the_agent_module_does_not_import_django():
    code = (
        "import sys, gpuagent.agent as a; "
        "assert not [m for m in sys.modules if m.split('.')[0] in ('django', 'rest_framework')]; "
        "print(a.VERSION)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=30
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "1.0"


def test_auto_source_falls_back_to_simulated_without_nvml():
    source = open_source("auto", gpus=4)  # no NVIDIA driver on the test machine
    assert source.name == "simulated"
    samples = source.read(1000.0)
    assert [s["gpu"] for s in samples] == [0, 1, 2, 3]


def test_full_buffer_drops_the_oldest_and_counts_them():
    buffer = SampleBuffer(capacity=5)
    buffer.extend([{"n": i} for i in range(8)])
    assert [s["n"] for s in buffer.peek(10)] == [3, 4, 5, 6, 7]
    assert buffer.dropped == 3


def test_samples_leave_the_buffer_only_when_accepted_and_retries_back_off(platform):
    platform.statuses = [503, 500, 429]
    sleeps: list[float] = []
    buffer = SampleBuffer(100)
    sender = Sender(
        platform.url,
        "gpn_t",
        buffer,
        batch_size=10,
        base_backoff=1.0,
        max_backoff=3.0,
        sleep=sleeps.append,
        rng=random.Random(1),
    )
    buffer.extend(SimulatedSource(gpus=4).read(1000.0))
    for _ in range(3):
        assert sender.send_once() is False
        assert len(buffer) == 4
    assert sender.send_once() is True
    assert len(buffer) == 0 and sender.sent == 4
    # Full jitter within a doubling cap: [0,1], [0,2], [0,3 (capped)].
    assert len(sleeps) == 3
    assert all(0 <= s <= cap for s, cap in zip(sleeps, [1, 2, 3], strict=True))
    (batch,) = platform.received
    assert len(batch["samples"]) == 4 and batch["agent"]["version"] == "1.0"
    assert platform.headers[-1]["Authorization"] == "Bearer gpn_t"


def test_an_invalid_batch_is_dropped_not_resent(platform):
    platform.statuses = [400]
    buffer = SampleBuffer(100)
    sender = Sender(platform.url, "gpn_t", buffer, batch_size=3, sleep=lambda s: None)
    buffer.extend(SimulatedSource(gpus=5).read(1000.0))
    assert sender.send_once() is True
    assert sender.rejected == 3 and len(buffer) == 2
    assert sender.send_once() is True
    assert sender.sent == 2 and len(platform.received) == 1


def test_an_unreachable_platform_never_blocks_sampling():
    buffer = SampleBuffer(capacity=20)
    # Nothing listens on port 9 (discard): every send fails fast; sampling goes on.
    sender = Sender("http://127.0.0.1:9", "gpn_t", buffer, batch_size=50, timeout=0.5)
    sender.sleep = lambda s: None
    agent = Agent(SimulatedSource(gpus=8), sender, interval=0.0, flush_every=0.05)
    agent.run(samples=5)  # 40 samples into a buffer of 20
    assert buffer.dropped == 20
    assert len(buffer) == 20


def test_the_agent_ships_every_sample_and_reports_its_drop_count(platform):
    buffer = SampleBuffer(capacity=1000)
    sender = Sender(platform.url, "gpn_t", buffer, batch_size=16)
    agent = Agent(SimulatedSource(gpus=8), sender, interval=0.0, flush_every=0.05)
    agent.run(samples=6)
    got = [s for batch in platform.received for s in batch["samples"]]
    assert len(got) == 48 and sender.sent == 48 and len(buffer) == 0
    assert all(batch["agent"]["dropped"] == 0 for batch in platform.received)


def test_an_ecc_or_xid_sample_is_shipped_without_waiting_for_the_flush(platform):
    buffer = SampleBuffer(capacity=1000)
    sender = Sender(platform.url, "gpn_t", buffer, batch_size=1000)
    source = SimulatedSource(gpus=8, xid_rate=1.0)  # every sample carries XID 79
    agent = Agent(source, sender, interval=0.05, flush_every=3600.0)
    thread = threading.Thread(target=agent.run, kwargs={"samples": 40}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 5
    while not platform.received and time.monotonic() < deadline:
        time.sleep(0.02)
    first = platform.received[0]["samples"] if platform.received else []
    agent.stop()
    thread.join(timeout=10)
    assert first and first[0]["xid"] == [79]
    assert len(first) < 320  # shipped before the sampling finished, not at the end


def test_stop_returns_without_waiting_out_the_flush_period(platform):
    """A service manager's stop (SIGTERM) ends the agent promptly, even when the sender is
    waiting an hour for a full batch."""
    buffer = SampleBuffer(capacity=1000)
    sender = Sender(platform.url, "gpn_t", buffer, batch_size=1000, timeout=10.0)
    # Every sample is urgent (XID 79), so the sender ships each at once and then waits for the
    # next one, which never comes once the sampling stops.
    agent = Agent(SimulatedSource(gpus=8, xid_rate=1.0), sender, interval=0.5, flush_every=3600.0)
    thread = threading.Thread(target=agent.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 5
    while not platform.received and time.monotonic() < deadline:
        time.sleep(0.02)
    agent.stop()
    thread.join(timeout=5)  # well under the join's own bound (request timeout + 1 s = 11 s)
    assert not thread.is_alive()
    assert platform.received and sum(len(b["samples"]) for b in platform.received) >= 8


def _run_agent(*args: str, url: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "gpuagent", "--url", url, "--token", "gpn_test"]
        + ["--source", "simulated", "--gpus", "2", "--samples", "2", "--timeout", "2", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.mark.parametrize(
    ("option", "value"),
    [
        ("--buffer", "0"),  # crashed at the first sample (IndexError)
        ("--batch-size", "0"),  # ran, and never shipped a sample
        ("--max-backoff", "-1"),  # the first failed post killed the sender thread
        ("--interval", "-5"),  # sampled as fast as the CPU goes
        ("--flush-seconds", "nan"),
        ("--timeout", "1e300"),  # overflows the thread waits
        ("--gpus", "-1"),
        ("--xid-rate", "2"),
    ],
)
def test_a_bad_number_on_the_command_line_is_exit_2_naming_the_option(platform, option, value):
    out = _run_agent(option, value, url=platform.url)
    assert out.returncode == 2, out.stderr[-2000:]
    assert f"argument {option}:" in out.stderr
    assert platform.received == []  # it stopped before sampling or sending anything


def test_the_command_line_defaults_still_run_and_ship(platform):
    out = _run_agent("--flush-seconds", "0.1", url=platform.url)
    assert out.returncode == 0, out.stderr[-2000:]
    assert sum(len(batch["samples"]) for batch in platform.received) == 4
