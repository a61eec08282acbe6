"""Load generator for a running gpuplatform (PostgreSQL + Redis + Celery loop), loopback only.

Scenarios (each bounded in count AND time; see benchmarks/load/README.md):

  submit  single job submissions at a target rate for a duration (POST /api/v1/jobs/)
  array   job-array submissions (POST /api/v1/job-arrays/): jobs per second through arrays
  list    job list reads (GET /api/v1/jobs/?limit=N)
  ws      N websocket clients on /ws/stream/ (session cookie from the /login/ form) while jobs
          are submitted and the loop starts them; per delivery latency = receive time - the
          payload's server "time" (same host clock)
  soak    all of the above mixed, plus cancels, group cancels and node drain/release churn, for
          a duration; then checks that every submitted job id exists in a live or final state

Every scenario reports throughput, p50/p99/max latency, errors (non-expected status codes and
exceptions, 5xx counted apart) and the RSS of the server processes (``--server-pid``, with their
descendants, read from /proc). Output: a readable summary on stderr and JSON on stdout (or --out).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import random
import re
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime
from urllib.parse import urlparse

import httpx
import websockets

LIVE = {"pending", "running", "preempted"}
FINAL = {"succeeded", "failed", "cancelled"}
HARD_TIMEOUT_S = 3600  # no scenario may run longer than this, whatever the arguments


def pct(values: list[float], q: float) -> float | None:
    """The q-th percentile (nearest rank) of ``values`` in ms, or None when empty."""
    if not values:
        return None
    ordered = sorted(values)
    rank = max(0, min(len(ordered) - 1, round(q / 100 * len(ordered) + 0.5) - 1))
    return round(ordered[rank] * 1000, 1)


@dataclass
class Stats:
    """Latencies and outcomes of one kind of request."""

    name: str
    expected: tuple[int, ...] = (200,)
    latencies: list[float] = field(default_factory=list)
    statuses: Counter = field(default_factory=Counter)
    exceptions: Counter = field(default_factory=Counter)
    started: float = field(default_factory=time.monotonic)
    ended: float | None = None
    units: int = 0  # e.g. jobs created, when one request makes many

    def record(self, status: int, seconds: float, units: int = 0) -> None:
        self.statuses[status] += 1
        self.latencies.append(seconds)
        if status in self.expected:
            self.units += units

    def failed(self, exc: BaseException) -> None:
        self.exceptions[type(exc).__name__] += 1

    def summary(self) -> dict:
        elapsed = (self.ended or time.monotonic()) - self.started
        ok = sum(n for s, n in self.statuses.items() if s in self.expected)
        errors = sum(n for s, n in self.statuses.items() if s not in self.expected)
        return {
            "requests": sum(self.statuses.values()) + sum(self.exceptions.values()),
            "ok": ok,
            "errors": errors + sum(self.exceptions.values()),
            "server_5xx": sum(n for s, n in self.statuses.items() if s >= 500),
            "statuses": {str(k): v for k, v in sorted(self.statuses.items())},
            "exceptions": dict(self.exceptions),
            "elapsed_s": round(elapsed, 2),
            "throughput_per_s": round(ok / elapsed, 1) if elapsed > 0 else None,
            "units_per_s": round(self.units / elapsed, 1) if self.units and elapsed > 0 else None,
            "p50_ms": pct(self.latencies, 50),
            "p99_ms": pct(self.latencies, 99),
            "max_ms": round(max(self.latencies) * 1000, 1) if self.latencies else None,
        }


# --------------------------------------------------------------------------- server memory


def _children() -> dict[int, list[int]]:
    tree: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as fh:
                stat = fh.read()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        tree.setdefault(ppid, []).append(int(entry))
    return tree


def _rss_kib(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/status") as fh:
            for line in fh:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def server_rss(roots: list[int]) -> dict:
    """RSS in MiB of each root process and all its descendants (e.g. uvicorn master + workers)."""
    if not roots:
        return {}
    tree = _children()
    pids, todo = [], list(roots)
    while todo:
        pid = todo.pop()
        pids.append(pid)
        todo.extend(tree.get(pid, []))
    per = {pid: _rss_kib(pid) for pid in pids}
    return {
        "total_mib": round(sum(per.values()) / 1024, 1),
        "processes": {str(p): round(k / 1024, 1) for p, k in per.items()},
    }


def tree_cpu_s(roots: list[int]) -> float:
    """CPU seconds (user + system) used so far by the live processes of the trees at ``roots``."""
    if not roots:
        return 0.0
    tree = _children()
    total, todo = 0, list(roots)
    while todo:
        pid = todo.pop()
        todo.extend(tree.get(pid, []))
        try:
            with open(f"/proc/{pid}/stat") as fh:
                fields_ = fh.read().rsplit(")", 1)[1].split()
            total += int(fields_[11]) + int(fields_[12])
        except (OSError, IndexError, ValueError):
            continue
    return total / os.sysconf("SC_CLK_TCK")


class RssSampler:
    """Samples server RSS every ``period`` seconds in the background."""

    def __init__(self, roots: list[int], period: float):
        self.roots, self.period, self.samples = roots, period, []
        self._task: asyncio.Task | None = None

    async def _run(self) -> None:
        t0 = time.monotonic()
        while True:
            sample = server_rss(self.roots)
            if sample:
                self.samples.append((round(time.monotonic() - t0, 1), sample["total_mib"]))
            await asyncio.sleep(self.period)

    def start(self) -> None:
        if self.roots:
            self._task = asyncio.create_task(self._run())

    async def stop(self) -> dict:
        if self._task:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        if not self.samples:
            return {}
        totals = [mib for _, mib in self.samples]
        third = max(1, len(totals) // 3)
        return {
            "start_mib": totals[0],
            "end_mib": totals[-1],
            "max_mib": max(totals),
            "first_third_mean_mib": round(sum(totals[:third]) / third, 1),
            "last_third_mean_mib": round(sum(totals[-third:]) / third, 1),
            "samples": self.samples,
            "final": server_rss(self.roots),
        }


# --------------------------------------------------------------------------- auth helpers


async def api_token(client: httpx.AsyncClient, username: str, password: str) -> str:
    response = await client.post(
        "/api/v1/auth/token", json={"username": username, "password": password}
    )
    response.raise_for_status()
    return response.json()["token"]


async def session_cookie(base: str, username: str, password: str) -> str:
    """Log in through the /login/ form (CSRF token included) and return the sessionid."""
    async with httpx.AsyncClient(base_url=base, timeout=30) as client:
        page = await client.get("/login/")
        match = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page.text)
        if not match:
            raise RuntimeError("no CSRF token on /login/")
        response = await client.post(
            "/login/",
            data={
                "username": username,
                "password": password,
                "csrfmiddlewaretoken": match.group(1),
            },
            headers={"Referer": f"{base}/login/"},
        )
        sessionid = client.cookies.get("sessionid")
        if response.status_code not in (200, 302) or not sessionid:
            raise RuntimeError(f"login failed ({response.status_code}); no sessionid cookie")
        return sessionid


def job_body(i: int, args) -> dict:
    return {
        "name": f"load-{i}",
        "team": args.team,
        "workers": 1,
        "gpus_per_worker": random.choice((1, 1, 2, 4)),
        "gpu_model": "h100-80gb",
        "priority_class": "research",
        "checkpoint_interval_s": 300,
        "simulated_duration_s": args.job_seconds,
    }


async def timed(stats: Stats, coro_factory, units: int = 0):
    t0 = time.perf_counter()
    try:
        response = await coro_factory()
    except (httpx.HTTPError, OSError) as exc:
        stats.failed(exc)
        return None
    stats.record(response.status_code, time.perf_counter() - t0, units)
    return response


async def paced(rate: float, duration: float, concurrency: int, work) -> int:
    """Call ``work(i)`` at ``rate`` per second for ``duration`` seconds with at most
    ``concurrency`` calls in flight (a call that cannot start on time starts late; the achieved
    rate is what the stats report). Returns how many calls were made."""
    total = int(rate * duration)
    semaphore = asyncio.Semaphore(concurrency)
    t0 = time.monotonic()
    tasks = set()

    async def one(i: int) -> None:
        try:
            await work(i)
        finally:
            semaphore.release()

    for i in range(total):
        delay = t0 + i / rate - time.monotonic()
        if delay > 0:
            await asyncio.sleep(delay)
        await semaphore.acquire()
        if time.monotonic() - t0 > duration * 1.5 + 10:
            semaphore.release()
            break  # far behind schedule: stop rather than run unbounded
        task = asyncio.create_task(one(i))
        tasks.add(task)
        task.add_done_callback(tasks.discard)
    if tasks:
        await asyncio.gather(*tasks)
    return total


def api_client(args, token: str, concurrency: int) -> httpx.AsyncClient:
    # Idle keep-alive connections expire before uvicorn's 5 s keep-alive timeout: otherwise the
    # server may close one just as a request is sent on it (a client-side ReadError).
    limits = httpx.Limits(
        max_connections=concurrency, max_keepalive_connections=concurrency, keepalive_expiry=2.0
    )
    return httpx.AsyncClient(
        base_url=args.base,
        headers={"Authorization": f"Bearer {token}"},
        timeout=args.timeout,
        limits=limits,
    )


# --------------------------------------------------------------------------- scenarios


async def scenario_submit(args, token: str) -> dict:
    stats = Stats("submit", expected=(201,))
    async with api_client(args, token, args.concurrency) as client:

        async def work(i: int):
            await timed(stats, lambda: client.post("/api/v1/jobs/", json=job_body(i, args)))

        await paced(args.rate, args.duration, args.concurrency, work)
    stats.ended = time.monotonic()
    return {"submit": stats.summary(), "target_rate": args.rate}


async def scenario_array(args, token: str) -> dict:
    stats = Stats("array", expected=(201,))
    async with api_client(args, token, args.concurrency) as client:
        queue = asyncio.Queue()
        for i in range(args.arrays):
            queue.put_nowait(i)
        deadline = time.monotonic() + args.duration

        async def worker():
            while not queue.empty() and time.monotonic() < deadline:
                i = queue.get_nowait()
                body = {
                    "name": f"sweep-{i}",
                    "team": args.team,
                    "template": {
                        k: v for k, v in job_body(i, args).items() if k not in ("name", "team")
                    },
                    "items": [{"env": {"SEED": str(k)}} for k in range(args.size)],
                }
                await timed(
                    stats, lambda b=body: client.post("/api/v1/job-arrays/", json=b), args.size
                )

        await asyncio.gather(*(worker() for _ in range(args.concurrency)))
    stats.ended = time.monotonic()
    summary = stats.summary()
    summary["jobs_per_s"] = summary.pop("units_per_s")
    return {"array": summary, "size": args.size}


async def scenario_list(args, token: str) -> dict:
    stats = Stats("list")
    async with api_client(args, token, args.concurrency) as client:

        async def work(i: int):
            await timed(stats, lambda: client.get(f"/api/v1/jobs/?limit={args.limit}"))

        await paced(args.rate, args.duration, args.concurrency, work)
    stats.ended = time.monotonic()
    return {"list": stats.summary(), "limit": args.limit}


class WsFleet:
    """N websocket clients of one session, recording each job.status delivery's latency."""

    def __init__(self, args, sessionid: str):
        self.args, self.sessionid = args, sessionid
        self.deliveries: list[tuple[int, int, str, float]] = []  # client, job, state, latency
        self.connected = 0
        self.connect_errors: Counter = Counter()
        self.drops = 0
        self.received: Counter = Counter()  # every message type, all clients together
        self.t0 = time.monotonic()
        self.tasks: list[asyncio.Task] = []
        self.stopping = asyncio.Event()

    async def _client(self, n: int, gate: asyncio.Semaphore) -> None:
        parsed = urlparse(self.args.base)
        url = f"ws://{parsed.netloc}/ws/stream/?topics={self.args.topics}"
        headers = {"Cookie": f"sessionid={self.sessionid}"}
        while not self.stopping.is_set():
            try:
                async with gate:
                    ws = await websockets.connect(
                        url,
                        additional_headers=headers,
                        origin=f"http://{parsed.netloc}",
                        open_timeout=30,
                        max_queue=None,
                    )
                    hello = json.loads(await asyncio.wait_for(ws.recv(), 30))
                    if hello.get("type") != "hello":
                        raise RuntimeError(f"unexpected first message {hello}")
                self.connected += 1
                try:
                    async for raw in ws:
                        now = time.time()
                        message = json.loads(raw)
                        kind = message.get("type")
                        self.received[kind] += 1
                        # A jobs.status batch carries job.status updates; each is a delivery.
                        updates = message.get("jobs", []) if kind == "jobs.status" else [message]
                        for update in updates if kind in ("job.status", "jobs.status") else []:
                            sent = datetime.fromisoformat(update["time"]).timestamp()
                            self.deliveries.append((n, update["job"], update["state"], now - sent))
                finally:
                    self.connected -= 1
                    await ws.close()
                if not self.stopping.is_set():
                    self.drops += 1
            except asyncio.CancelledError:
                return
            except Exception as exc:  # noqa: BLE001 - every failure is counted and retried
                self.connect_errors[type(exc).__name__] += 1
                await asyncio.sleep(1)

    async def start(self, count: int) -> float:
        gate = asyncio.Semaphore(50)  # connect 50 at a time: a connect storm is not the test
        t0 = time.monotonic()
        self.tasks = [asyncio.create_task(self._client(n, gate)) for n in range(count)]
        while self.connected < count and time.monotonic() - t0 < 120:
            await asyncio.sleep(0.2)
        return time.monotonic() - t0

    async def stop(self) -> None:
        self.stopping.set()
        for task in self.tasks:
            task.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)

    def summary(self, jobs: set[int], clients: int) -> dict:
        mine = [d for d in self.deliveries if d[1] in jobs]
        # Distinct (client, job) pairs: the loop re-publishes pending jobs whose reason changed.
        submitted_seen = {(d[0], d[1]) for d in mine if d[2] == "pending"}
        expected = len(jobs) * clients
        return {
            "clients": clients,
            "jobs_watched": len(jobs),
            "deliveries": len(mine),
            "pending_notice_delivered_fraction": (
                round(len(submitted_seen) / expected, 4) if expected else None
            ),
            "states_seen": dict(Counter(d[2] for d in mine)),
            "p50_ms": pct([d[3] for d in mine], 50),
            "p99_ms": pct([d[3] for d in mine], 99),
            "max_ms": round(max(d[3] for d in mine) * 1000, 1) if mine else None,
            "within_1s_fraction": (
                round(sum(d[3] <= 1.0 for d in mine) / len(mine), 4) if mine else None
            ),
            "messages_received_by_type": dict(self.received),
            "messages_per_client_per_s": (
                round(sum(self.received.values()) / clients / (time.monotonic() - self.t0), 2)
                if clients
                else None
            ),
            "connect_errors": dict(self.connect_errors),
            "drops": self.drops,
        }


async def scenario_ws(args, token: str) -> dict:
    sessionid = await session_cookie(args.base, args.user, args.password)
    fleet = WsFleet(args, sessionid)
    connect_s = await fleet.start(args.clients)
    connected = fleet.connected
    stats = Stats("submit", expected=(201,))
    jobs: set[int] = set()
    async with api_client(args, token, 4) as client:
        for i in range(args.changes):
            response = await timed(
                stats, lambda i=i: client.post("/api/v1/jobs/", json=job_body(i, args))
            )
            if response is not None and response.status_code == 201:
                jobs.add(response.json()["id"])
            await asyncio.sleep(args.change_interval)
    await asyncio.sleep(args.settle)  # the loop starts the jobs: more state changes to deliver
    await fleet.stop()
    return {
        "ws": fleet.summary(jobs, args.clients)
        | {"connected": connected, "connect_s": round(connect_s, 1)},
        "submit": stats.summary(),
    }


async def _collect_states(client: httpx.AsyncClient, ids: set[int]) -> dict[int, str]:
    states: dict[int, str] = {}
    offset = 0
    while True:
        response = await client.get(f"/api/v1/jobs/?limit=1000&offset={offset}", timeout=120)
        response.raise_for_status()
        page = response.json()
        for job in page["results"]:
            if job["id"] in ids:
                states[job["id"]] = job["state"]
        offset += len(page["results"])
        if not page["next"] or not page["results"] or offset > 2_000_000:
            return states


async def scenario_soak(args, token: str) -> dict:
    """Mixed load for ``--duration`` seconds, then the no-lost-job check."""
    stats = {
        "submit": Stats("submit", expected=(201,)),
        "array": Stats("array", expected=(201,)),
        "list": Stats("list"),
        "detail": Stats("detail"),
        "cancel": Stats("cancel", expected=(200, 409)),
        "array_cancel": Stats("array_cancel", expected=(200, 409)),
        "node": Stats("node", expected=(200, 409)),
    }
    submitted: set[int] = set()
    arrays: list[int] = []
    deadline = time.monotonic() + args.duration
    sessionid = await session_cookie(args.base, args.user, args.password)
    fleet = WsFleet(args, sessionid)
    await fleet.start(args.clients)
    async with (
        api_client(args, token, args.concurrency) as client,
        httpx.AsyncClient(base_url=args.base, timeout=args.timeout) as anon,
    ):
        admin = await api_token(anon, args.admin_user, args.admin_password)
        admin_headers = {"Authorization": f"Bearer {admin}"}
        nodes = (await client.get("/api/v1/nodes/?limit=1000")).json()["results"]

        async def submitter():
            async def work(i: int):
                r = await timed(
                    stats["submit"], lambda: client.post("/api/v1/jobs/", json=job_body(i, args))
                )
                if r is not None and r.status_code == 201:
                    submitted.add(r.json()["id"])

            await paced(args.rate, args.duration, args.concurrency, work)

        async def arrayer():
            i = 0
            while time.monotonic() < deadline:
                body = {
                    "name": f"soak-sweep-{i}",
                    "team": args.team,
                    "template": {
                        k: v for k, v in job_body(i, args).items() if k not in ("name", "team")
                    },
                    "count": args.size,
                }
                r = await timed(
                    stats["array"],
                    lambda b=body: client.post("/api/v1/job-arrays/", json=b),
                    args.size,
                )
                if r is not None and r.status_code == 201:
                    arrays.append(r.json()["id"])
                i += 1
                await asyncio.sleep(args.array_interval)

        async def reader():
            async def work(i: int):
                if i % 3 == 0 and submitted:
                    job_id = random.choice(tuple(submitted))
                    await timed(stats["detail"], lambda: client.get(f"/api/v1/jobs/{job_id}/"))
                elif i % 3 == 1:
                    await timed(stats["list"], lambda: client.get("/api/v1/job-arrays/?limit=20"))
                else:
                    await timed(
                        stats["list"], lambda: client.get(f"/api/v1/jobs/?limit={args.limit}")
                    )

            await paced(args.read_rate, args.duration, args.concurrency, work)

        async def canceller():
            n = 0
            while time.monotonic() < deadline:
                await asyncio.sleep(1.0)
                if submitted:
                    job_id = random.choice(tuple(submitted))
                    await timed(
                        stats["cancel"], lambda j=job_id: client.post(f"/api/v1/jobs/{j}/cancel/")
                    )
                n += 1
                if n % 60 == 0 and arrays:
                    array_id = random.choice(arrays)
                    await timed(
                        stats["array_cancel"],
                        lambda a=array_id: client.post(f"/api/v1/job-arrays/{a}/cancel/"),
                    )

        async def node_churn():
            while time.monotonic() < deadline - 40:
                await asyncio.sleep(args.node_interval)
                node = random.choice(nodes)
                base = f"/api/v1/admin/nodes/{node['id']}"
                await timed(
                    stats["node"],
                    lambda b=base: client.post(
                        f"{b}/drain/", json={"reason": "soak"}, headers=admin_headers
                    ),
                )
                await asyncio.sleep(min(30, args.node_interval / 2))
                await timed(
                    stats["node"],
                    lambda b=base: client.post(f"{b}/release/", headers=admin_headers),
                )

        sampler = RssSampler(args.server_pid, args.rss_period)
        sampler.start()
        await asyncio.gather(submitter(), arrayer(), reader(), canceller(), node_churn())
        for s in stats.values():
            s.ended = time.monotonic()
        await fleet.stop()
        memory = await sampler.stop()

        # Every job id submitted (singles and array members) must exist in a live or final state.
        for array_id in arrays:
            offset = 0
            while True:
                r = await client.get(
                    f"/api/v1/job-arrays/{array_id}/jobs/?limit=1000&offset={offset}"
                )
                page = r.json()
                submitted.update(j["id"] for j in page["results"])
                offset += len(page["results"])
                if not page["next"]:
                    break
        states = await _collect_states(client, submitted)
    lost = sorted(submitted - set(states))
    bad = sorted(j for j, s in states.items() if s not in LIVE | FINAL)
    return {
        **{name: s.summary() for name, s in stats.items()},
        "ws": fleet.summary(submitted, args.clients),
        "jobs": {
            "submitted": len(submitted),
            "arrays": len(arrays),
            "lost": lost[:50],
            "lost_count": len(lost),
            "invalid_state": bad[:50],
            "states": dict(Counter(states.values())),
        },
        "server_5xx_total": sum(s.summary()["server_5xx"] for s in stats.values()),
        "memory": memory,
    }


SCENARIOS = {
    "submit": scenario_submit,
    "array": scenario_array,
    "list": scenario_list,
    "ws": scenario_ws,
    "soak": scenario_soak,
}


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("scenario", choices=sorted(SCENARIOS))
    parser.add_argument("--base", default="http://127.0.0.1:8100")
    parser.add_argument("--user", default="alice")
    parser.add_argument("--password", default="demo")
    parser.add_argument("--admin-user", default="admin")
    parser.add_argument("--admin-password", default="demo")
    parser.add_argument("--team", default="vision")
    parser.add_argument("--rate", type=float, default=100.0, help="requests per second")
    parser.add_argument("--duration", type=float, default=30.0, help="seconds")
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--timeout", type=float, default=30.0)
    parser.add_argument("--limit", type=int, default=50, help="page size of list reads")
    parser.add_argument("--arrays", type=int, default=10, help="array scenario: arrays to send")
    parser.add_argument("--size", type=int, default=1000, help="indices per array")
    parser.add_argument("--clients", type=int, default=100, help="websocket clients")
    parser.add_argument("--changes", type=int, default=20, help="ws: jobs submitted while watched")
    parser.add_argument("--change-interval", type=float, default=0.25)
    parser.add_argument("--settle", type=float, default=8.0, help="ws: seconds to keep listening")
    parser.add_argument(
        "--topics",
        default="jobs",
        help="ws: topics each socket asks for (jobs page: jobs; cluster view: "
        "jobs,cluster,utilization)",
    )
    parser.add_argument("--job-seconds", type=float, default=600.0, help="simulated duration")
    parser.add_argument("--read-rate", type=float, default=20.0, help="soak: reads per second")
    parser.add_argument("--array-interval", type=float, default=15.0, help="soak: s between arrays")
    parser.add_argument("--node-interval", type=float, default=60.0, help="soak: s between drains")
    parser.add_argument(
        "--server-pid",
        type=int,
        action="append",
        default=[],
        help="root pid of a server process tree to measure (repeatable)",
    )
    parser.add_argument("--rss-period", type=float, default=10.0)
    parser.add_argument(
        "--pg-pid",
        type=int,
        action="append",
        default=[],
        help="PostgreSQL postmaster pid, for the CPU account (optional)",
    )
    parser.add_argument("--out", help="write the JSON result here too")
    args = parser.parse_args(argv)
    if urlparse(args.base).hostname not in ("127.0.0.1", "localhost", "::1"):
        parser.error("loopback targets only")
    return args


async def main_async(args) -> dict:
    async with httpx.AsyncClient(base_url=args.base, timeout=args.timeout) as client:
        token = await api_token(client, args.user, args.password)
    before = server_rss(args.server_pid)
    cpu_before = {
        "server": tree_cpu_s(args.server_pid),
        "postgres": tree_cpu_s(args.pg_pid),
    }
    sampler = RssSampler(args.server_pid, args.rss_period) if args.scenario != "soak" else None
    if sampler:
        sampler.start()
    result = await asyncio.wait_for(SCENARIOS[args.scenario](args, token), HARD_TIMEOUT_S)
    if sampler:
        result["memory"] = await sampler.stop()
    result["memory_before"] = before
    # CPU seconds the server trees (and PostgreSQL, whole cluster: other users' work included)
    # spent during the run: divide by the requests for a cost per request that does not depend
    # on how busy the machine was.
    result["cpu_s"] = {
        "server": round(tree_cpu_s(args.server_pid) - cpu_before["server"], 2),
        "postgres": round(tree_cpu_s(args.pg_pid) - cpu_before["postgres"], 2),
    }
    result["scenario"] = args.scenario
    result["load_average"] = os.getloadavg()
    return result


def main(argv=None) -> int:
    args = parse_args(argv)
    result = asyncio.run(main_async(args))
    text = json.dumps(result, indent=2, default=str)
    print(text)
    if args.out:
        with open(args.out, "w") as fh:
            fh.write(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
