"""The node agent: ``gpuagent --url https://platform --token-file F`` (or ``python -m gpuagent``).

Runs on GPU nodes, so it imports only the standard library (and ``pynvml`` from nvidia-ml-py
when present), never Django. It samples every GPU once per ``--interval`` from NVML, or from a
simulated source where NVML is missing, and ships batches to ``POST /api/v1/telemetry/samples``.

Guarantees:
- Sampling never waits for the platform: samples go into a bounded buffer and a separate sender
  thread ships them. When the buffer is full the OLDEST samples are dropped and counted; the
  count rides in every batch (``agent.dropped``) so the platform shows it.
- A batch leaves the buffer only once the platform accepted it (2xx) or refused it as invalid
  (400: resending cannot help; counted in ``rejected``). Network errors, 5xx, 401/403 and 429 are
  retried with exponential backoff and full jitter, capped at ``--max-backoff`` seconds, each
  time with the very same batch (the platform stores a repeated batch once).
- ECC counts are sent as errors since the GPU's previous sample (NVML's volatile counters are
  cumulative since the driver loaded); XID codes come from an NVML event set.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import random
import signal
import socket
import threading
import time
import urllib.error
import urllib.request
from collections import Counter, deque
from collections.abc import Callable
from typing import Any, NotRequired, Protocol, TypedDict, TypeVar, overload

VERSION = "1.0"
# NVML clock-event reasons: software (0x20) and hardware (0x40) thermal slowdown.
THERMAL_SLOWDOWN_MASK = 0x20 | 0x40
log = logging.getLogger("gpuplatform.agent")
T = TypeVar("T")


class Sample(TypedDict):
    """One GPU's reading: the wire format of ``POST /api/v1/telemetry/samples``
    (docs/telemetry.md). Units are in the names; ECC counts are errors since the previous
    sample; ``xid`` lists the XID codes seen since then."""

    gpu: int
    time: float  # Unix seconds
    utilization: float  # percent
    memory_used_mib: int
    memory_total_mib: int
    temperature_c: int
    power_w: float | None  # None: the GPU does not report power
    throttle_thermal: bool
    ecc_sbe: NotRequired[int]
    ecc_dbe: NotRequired[int]
    xid: NotRequired[list[int]]


class Source(Protocol):
    """Where samples come from: NVML on a GPU node, or a simulation."""

    name: str

    def read(self, now: float) -> list[Sample]: ...

    def close(self) -> None: ...


# ------------------------------------------------------------------------------- sources


class SimulatedSource:
    """Plausible readings for ``gpus`` GPUs, deterministic for a ``seed``; optional fault rates
    (per GPU per sample) exercise the platform's health rules in demos."""

    name = "simulated"

    def __init__(
        self,
        gpus: int = 8,
        seed: int = 0,
        xid_rate: float = 0.0,
        dbe_rate: float = 0.0,
        busy: float = 0.7,
    ):
        self.gpus = gpus
        self.rng = random.Random(seed)
        self.xid_rate, self.dbe_rate, self.busy = xid_rate, dbe_rate, busy

    def read(self, now: float) -> list[Sample]:
        out = []
        for gpu in range(self.gpus):
            busy = self.rng.random() < self.busy
            util = round(self.rng.uniform(60, 100) if busy else self.rng.uniform(0, 3), 1)
            temp = round(35 + util * 0.45 + self.rng.uniform(-2, 2))
            sample: Sample = {
                "gpu": gpu,
                "time": round(now, 3),
                "utilization": util,
                "memory_used_mib": int(81559 * (0.6 if busy else 0.01)),
                "memory_total_mib": 81559,
                "temperature_c": temp,
                "power_w": round(70 + util * 6.3, 1),
                "throttle_thermal": False,
            }
            if self.rng.random() < self.dbe_rate:
                sample["ecc_dbe"] = 1
            if self.rng.random() < self.xid_rate:
                sample["xid"] = [79]
            out.append(sample)
        return out

    def close(self) -> None:
        pass


class NvmlSource:
    """Readings from NVML (``pynvml`` of nvidia-ml-py). Raises at construction when NVML or
    its library is unavailable, so ``auto`` can fall back to the simulated source."""

    name = "nvml"

    def __init__(self) -> None:
        import pynvml  # noqa: PLC0415 (optional dependency, only on GPU nodes)

        self.nvml = pynvml
        pynvml.nvmlInit()
        self.handles = [
            pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(pynvml.nvmlDeviceGetCount())
        ]
        self.ecc_seen: dict[tuple[int, str], int] = {}
        self.events = None
        try:
            self.events = pynvml.nvmlEventSetCreate()
            for h in self.handles:
                pynvml.nvmlDeviceRegisterEvents(
                    h, pynvml.nvmlEventTypeXidCriticalError, self.events
                )
        except pynvml.NVMLError:
            self.events = None  # XID events need root on some drivers: go without them
        # Renamed "clocks event reasons" in recent NVML; the old name remains an alias.
        self._reasons = getattr(pynvml, "nvmlDeviceGetCurrentClocksEventReasons", None) or (
            pynvml.nvmlDeviceGetCurrentClocksThrottleReasons
        )
        self.index_of: dict[int, int] = {}
        for i, h in enumerate(self.handles):
            try:
                self.index_of[pynvml.nvmlDeviceGetIndex(h)] = i
            except pynvml.NVMLError:
                self.index_of[i] = i

    @overload
    def _try(self, fn: Callable[..., T], *args: Any) -> T | None: ...

    @overload
    def _try(self, fn: Callable[..., T], *args: Any, default: T) -> T: ...

    def _try(self, fn: Callable[..., T], *args: Any, default: T | None = None) -> T | None:
        """``fn(*args)``, or ``default`` when NVML raises (a GPU without that sensor)."""
        try:
            return fn(*args)
        except self.nvml.NVMLError:
            return default

    def _ecc_delta(self, gpu: int, handle: Any, kind: str, error_type: int) -> int:
        nv = self.nvml
        total = self._try(
            nv.nvmlDeviceGetTotalEccErrors, handle, error_type, nv.NVML_VOLATILE_ECC, default=None
        )
        if total is None:
            return 0
        total = int(total)
        previous = self.ecc_seen.get((gpu, kind))
        self.ecc_seen[(gpu, kind)] = total
        # The first reading reports what the driver counted before the agent started; a
        # counter that went down means the driver reloaded: count from zero again.
        if previous is None or total < previous:
            return total
        return total - previous

    def _xids(self) -> dict[int, list[int]]:
        out: dict[int, list[int]] = {}
        if self.events is None:
            return out
        nv = self.nvml
        while True:
            try:
                data = nv.nvmlEventSetWait_v2(self.events, 0)
            except nv.NVMLError:
                return out  # timeout: no more pending events
            try:
                gpu = self.index_of.get(nv.nvmlDeviceGetIndex(data.device), 0)
            except nv.NVMLError:
                gpu = 0
            out.setdefault(gpu, []).append(int(data.eventData))

    def read(self, now: float) -> list[Sample]:
        nv = self.nvml
        xids = self._xids()
        out = []
        for gpu, h in enumerate(self.handles):
            rates = self._try(nv.nvmlDeviceGetUtilizationRates, h)
            mem = self._try(nv.nvmlDeviceGetMemoryInfo, h)
            temp = self._try(nv.nvmlDeviceGetTemperature, h, nv.NVML_TEMPERATURE_GPU, default=0)
            power = self._try(nv.nvmlDeviceGetPowerUsage, h)
            reasons = self._try(self._reasons, h, default=0)
            sample: Sample = {
                "gpu": gpu,
                "time": round(now, 3),
                "utilization": float(rates.gpu) if rates is not None else 0.0,
                "memory_used_mib": int(mem.used // 2**20) if mem is not None else 0,
                "memory_total_mib": max(1, int(mem.total // 2**20)) if mem is not None else 1,
                "temperature_c": int(temp),
                "power_w": round(power / 1000, 1) if power is not None else None,
                "throttle_thermal": bool(reasons & THERMAL_SLOWDOWN_MASK),
                "ecc_sbe": self._ecc_delta(gpu, h, "sbe", nv.NVML_MEMORY_ERROR_TYPE_CORRECTED),
                "ecc_dbe": self._ecc_delta(gpu, h, "dbe", nv.NVML_MEMORY_ERROR_TYPE_UNCORRECTED),
            }
            if xids.get(gpu):
                sample["xid"] = xids[gpu]
            out.append(sample)
        return out

    def close(self) -> None:
        try:
            if self.events is not None:
                self.nvml.nvmlEventSetFree(self.events)
            self.nvml.nvmlShutdown()
        except Exception:  # shutting down: nothing useful to do with an error
            pass


def open_source(kind: str, *, gpus: int = 8, seed: int = 0, **fault_rates: float) -> Source:
    """``nvml``, ``simulated`` or ``auto`` (NVML when it initialises, else simulated)."""
    if kind in ("nvml", "auto"):
        try:
            return NvmlSource()
        except Exception as exc:  # ImportError, NVMLError_LibraryNotFound, no driver…
            if kind == "nvml":
                raise
            log.info("NVML unavailable (%s); using the simulated source", exc)
    return SimulatedSource(gpus=gpus, seed=seed, **fault_rates)


# -------------------------------------------------------------------------------- buffer

# The platform refuses a whole batch holding a sample with more XID codes than this
# (docs/telemetry.md), and the agent drops a refused batch.
MAX_XIDS_PER_SAMPLE = 100


def bounded_xids(codes: list[int]) -> list[int]:
    """At most ``MAX_XIDS_PER_SAMPLE`` of ``codes``: every distinct code first, then repeats.

    An application's XID storm (XID 13 hundreds of times a second) used to make a sample the
    platform refuses, and with it the batch, including the one XID 79 of a GPU that fell off
    the bus meanwhile. Cut to the bound, the storm still counts as repeated XIDs (the health
    rules quarantine at a handful) and no code is lost."""
    if len(codes) <= MAX_XIDS_PER_SAMPLE:
        return codes
    distinct = list(dict.fromkeys(codes))
    repeats = list((Counter(codes) - Counter(distinct)).elements())
    return (distinct + repeats)[:MAX_XIDS_PER_SAMPLE]


class SampleBuffer:
    """Bounded FIFO of samples; when full, appending drops the oldest and counts it. A sample's
    XID codes are cut to the platform's bound on the way in (:func:`bounded_xids`)."""

    def __init__(self, capacity: int):
        self.capacity = capacity
        self.items: deque[Sample] = deque()
        self.dropped = 0
        self.lock = threading.Lock()
        self.ready = threading.Event()
        # Set when a sample carries an uncorrectable ECC error or an XID: ship it now, so the
        # platform can quarantine the node without waiting for the flush period.
        self.urgent = threading.Event()

    def extend(self, samples: list[Sample]) -> None:
        with self.lock:
            for s in samples:
                if "xid" in s:
                    s["xid"] = bounded_xids(s["xid"])
                if len(self.items) >= self.capacity:
                    self.items.popleft()
                    self.dropped += 1
                self.items.append(s)
                if s.get("ecc_dbe") or s.get("xid"):
                    self.urgent.set()
        self.ready.set()

    def peek(self, n: int) -> list[Sample]:
        with self.lock:
            return [self.items[i] for i in range(min(n, len(self.items)))]

    def remove(self, batch: list[Sample]) -> None:
        """Remove ``batch`` (taken by ``peek``) unless dropping already pushed it out."""
        ids = {id(s) for s in batch}
        with self.lock:
            while self.items and id(self.items[0]) in ids:
                self.items.popleft()

    def __len__(self) -> int:
        return len(self.items)


# -------------------------------------------------------------------------------- sender


class Sender:
    """Ships batches from the buffer; retries with capped exponential backoff and jitter."""

    RETRYABLE_CLIENT = {401, 403, 408, 409, 429}

    def __init__(
        self,
        url: str,
        token: str,
        buffer: SampleBuffer,
        *,
        batch_size: int = 1000,
        timeout: float = 10.0,
        base_backoff: float = 1.0,
        max_backoff: float = 60.0,
        sleep: Callable[[float], None] = time.sleep,
        rng: random.Random | None = None,
    ):
        self.url = url.rstrip("/") + "/api/v1/telemetry/samples"
        self.token = token
        self.buffer = buffer
        self.batch_size = batch_size
        self.timeout = timeout
        self.base_backoff, self.max_backoff = base_backoff, max_backoff
        self.sleep = sleep
        self.rng = rng or random.Random()
        self.failures = 0
        self.sent = 0
        self.rejected = 0
        # The batch of a failed attempt, sent again as it was until it is settled. The platform
        # may have stored it and lost only its answer; it knows a repeat only when the very
        # same samples come back (docs/telemetry.md), and a batch grown by the samples taken
        # meanwhile would store the first ones, and their ECC and XID errors, twice.
        self.in_flight: list[Sample] | None = None

    def body(self, batch: list[Sample]) -> bytes:
        return json.dumps(
            {"agent": {"version": VERSION, "dropped": self.buffer.dropped}, "samples": batch},
            separators=(",", ":"),
        ).encode()

    def post(self, batch: list[Sample]) -> int:
        """POST one batch; the HTTP status, or 0 when the platform could not be reached."""
        request = urllib.request.Request(
            self.url,
            data=self.body(batch),
            method="POST",
            headers={"Content-Type": "application/json", "Authorization": f"Bearer {self.token}"},
        )
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as response:
                return int(response.status)
        except urllib.error.HTTPError as exc:
            if exc.code == 400:
                log.error("platform refused a batch: %s", exc.read()[:500].decode(errors="replace"))
            return exc.code
        except (urllib.error.URLError, OSError, TimeoutError) as exc:
            log.warning("platform unreachable: %s", exc)
            return 0

    def backoff(self) -> float:
        """Full jitter: uniform in [0, min(max_backoff, base * 2^(failures - 1))]."""
        cap = min(self.max_backoff, self.base_backoff * 2 ** min(max(self.failures - 1, 0), 30))
        return self.rng.uniform(0, cap)

    def send_once(self) -> bool:
        """Try to ship one batch; True when the buffer moved on (sent or refused for good)."""
        batch = self.in_flight or self.buffer.peek(self.batch_size)
        if not batch:
            return False
        status = self.post(batch)
        if 200 <= status < 300:
            self.buffer.remove(batch)
            self.sent += len(batch)
            self.failures, self.in_flight = 0, None
            return True
        if 400 <= status < 500 and status not in self.RETRYABLE_CLIENT:
            self.buffer.remove(batch)  # invalid: resending the same bytes cannot succeed
            self.rejected += len(batch)
            self.failures, self.in_flight = 0, None
            return True
        self.in_flight = batch
        self.failures += 1
        self.sleep(self.backoff())
        return False


# ---------------------------------------------------------------------------------- main


class Agent:
    """Sample on the main thread, send on another; stop() flushes once and returns."""

    def __init__(
        self, source: Source, sender: Sender, *, interval: float = 1.0, flush_every: float = 30.0
    ):
        self.source, self.sender = source, sender
        self.interval, self.flush_every = interval, flush_every
        self.stopping = threading.Event()

    def _send_loop(self) -> None:
        buffer = self.sender.buffer
        while not self.stopping.is_set():
            buffer.ready.wait(timeout=self.flush_every)
            buffer.ready.clear()
            # Wait for a full batch, the flush period or an urgent sample, whichever first.
            deadline = time.monotonic() + self.flush_every
            while (
                len(buffer) < self.sender.batch_size
                and time.monotonic() < deadline
                and not buffer.urgent.is_set()
                and not self.stopping.is_set()
            ):
                self.stopping.wait(0.2)
            buffer.urgent.clear()
            while len(buffer) and not self.stopping.is_set():
                if not self.sender.send_once():
                    break

    def run(self, *, samples: int | None = None) -> None:
        """Sample until stopped (or ``samples`` rounds, for tests and one-shot use)."""
        thread = threading.Thread(target=self._send_loop, name="agent-sender", daemon=True)
        thread.start()
        rounds = 0
        next_at = time.monotonic()
        try:
            while not self.stopping.is_set():
                self.sender.buffer.extend(self.source.read(time.time()))
                rounds += 1
                if samples is not None and rounds >= samples:
                    break
                next_at += self.interval
                self.stopping.wait(max(0.0, next_at - time.monotonic()))
        finally:
            self.stop()
            thread.join(timeout=self.sender.timeout + 1)
            # One last attempt, bounded by the request timeout: never hang a shutdown.
            self.sender.sleep = lambda _s: None
            while len(self.sender.buffer) and self.sender.send_once():
                pass
            self.source.close()

    def stop(self, *_args: object) -> None:
        self.stopping.set()
        # The sender may be waiting for samples (up to the flush period): wake it, or a stop
        # waits out the join's timeout (the request timeout plus one second).
        self.sender.buffer.ready.set()


def _read_token(args: argparse.Namespace) -> str:
    if args.token_file:
        with open(args.token_file, encoding="utf-8") as fh:
            return fh.read().strip()
    return args.token or os.environ.get("GPUPLATFORM_NODE_TOKEN", "")


def _count(text: str) -> int:
    """A whole number >= 1 (``--batch-size``, ``--buffer``, ``--gpus``, ``--samples``)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, not {value}")
    return value


# The longest wait an option may ask for; a far larger one overflows the thread waits.
MAX_OPTION_SECONDS = 86400.0


def _seconds(text: str) -> float:
    """Seconds, more than 0 and at most a day (``--interval``, ``--flush-seconds``,
    ``--timeout``, ``--max-backoff``)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not 0 < value <= MAX_OPTION_SECONDS:  # NaN fails too
        raise argparse.ArgumentTypeError(
            f"must be more than 0 and at most {MAX_OPTION_SECONDS:.0f} seconds, not {text}"
        )
    return value


def _rate(text: str) -> float:
    """A probability per sample, 0 to 1 (``--xid-rate``, ``--dbe-rate``)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not 0 <= value <= 1:  # NaN fails too
        raise argparse.ArgumentTypeError(f"must be from 0 to 1, not {text}")
    return value


def main(argv: list[str] | None = None) -> int:
    # Numbers are checked here, where a mistake is an exit 2 naming the option: accepted, a
    # zero buffer crashed the agent at its first sample, a zero batch size shipped nothing
    # ever, and a negative --max-backoff killed the sender thread at the first failed post
    # while sampling went on (a node that looked alive and reported nothing).
    parser = argparse.ArgumentParser(prog="gpuagent")
    parser.add_argument("--url", default=os.environ.get("GPUPLATFORM_URL", ""), required=False)
    parser.add_argument("--token", help="node token (prefer --token-file or the environment)")
    parser.add_argument("--token-file")
    parser.add_argument("--source", choices=["auto", "nvml", "simulated"], default="auto")
    parser.add_argument("--gpus", type=_count, default=8, help="GPUs of the simulated source")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--xid-rate", type=_rate, default=0.0, help="simulated XIDs per sample")
    parser.add_argument("--dbe-rate", type=_rate, default=0.0, help="simulated DBEs per sample")
    parser.add_argument("--interval", type=_seconds, default=1.0, help="seconds between samples")
    parser.add_argument("--batch-size", type=_count, default=1000)
    # 30 s: 240 samples per batch on an 8-GPU node; the platform's cost is per request, so
    # small batches from a thousand nodes cost far more than the samples (docs/telemetry.md).
    # Samples with ECC double-bit errors or XIDs are shipped at once regardless.
    parser.add_argument("--flush-seconds", type=_seconds, default=30.0)
    parser.add_argument("--buffer", type=_count, default=100_000, help="samples kept while offline")
    parser.add_argument("--timeout", type=_seconds, default=10.0)
    parser.add_argument("--max-backoff", type=_seconds, default=60.0)
    parser.add_argument("--samples", type=_count, help="stop after this many sampling rounds")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    token = _read_token(args)
    if not args.url or not token:
        parser.error("--url and a token (--token-file, --token or GPUPLATFORM_NODE_TOKEN) needed")
    if not token.isascii() or not token.isprintable() or any(c.isspace() for c in token):
        parser.error("the token must be one word of printable ASCII (check the token file)")
    source = open_source(
        args.source, gpus=args.gpus, seed=args.seed, xid_rate=args.xid_rate, dbe_rate=args.dbe_rate
    )
    sender = Sender(
        args.url,
        token,
        SampleBuffer(args.buffer),
        batch_size=args.batch_size,
        timeout=args.timeout,
        max_backoff=args.max_backoff,
    )
    agent = Agent(source, sender, interval=args.interval, flush_every=args.flush_seconds)
    signal.signal(signal.SIGTERM, agent.stop)
    signal.signal(signal.SIGINT, agent.stop)
    log.info(
        "agent %s on %s: source %s, %s", VERSION, socket.gethostname(), source.name, sender.url
    )
    agent.run(samples=args.samples)
    log.info(
        "stopped: %d sent, %d rejected, %d dropped, %d unsent",
        sender.sent,
        sender.rejected,
        sender.buffer.dropped,
        len(sender.buffer),
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
