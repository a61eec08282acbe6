"""Running gpuctl as a script does, for the commands that block (``wait``, ``logs -f``,
``submit --wait``), against a real HTTP front that behaves as a server being restarted behind a
proxy (which those commands must outlast)."""

from __future__ import annotations

import http.server
import io
import threading
import time

import httpx

from gpuctl.main import main


class Background:
    """A gpuctl command that blocks, run in a thread; what it prints on stdout is kept."""

    def __init__(self, monkeypatch, *argv: str) -> None:
        self.out = io.StringIO()
        self.code: int | None = None
        for module in ("gpuctl.main", "gpuctl.waiting"):
            monkeypatch.setattr(f"{module}._out", lambda: self.out)
        self.thread = threading.Thread(target=self._run, args=(argv,), daemon=True)
        self.thread.start()

    def _run(self, argv) -> None:
        self.code = main(list(argv))

    def result(self, timeout: float = 30.0) -> tuple[int | None, str]:
        self.thread.join(timeout)
        assert not self.thread.is_alive(), f"still running: {self.out.getvalue()}"
        return self.code, self.out.getvalue()


class RestartingServer:
    """A real HTTP front for the live server that, like a deploy behind a proxy, answers its
    second and fourth requests 503 and drops the third's connection unanswered, and forwards
    every other to the server: gpuctl's own client meets each the way it would."""

    def __init__(self, upstream: str) -> None:
        self.reads: list[str] = []
        front = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                front.reads.append(self.path)
                if len(front.reads) == 3:
                    self.close_connection = True  # no answer at all: "cannot reach"
                    return
                if len(front.reads) in (2, 4):
                    body = b'{"detail": "restarting"}'
                    self.send_response(503)
                    self.send_header("Content-Type", "application/json")
                else:
                    answer = httpx.get(
                        upstream + self.path,
                        headers={"Authorization": self.headers.get("Authorization", "")},
                    )
                    body = answer.content
                    self.send_response(answer.status_code)
                    self.send_header("Content-Type", answer.headers.get("content-type", ""))
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def outlasted_by(self, command: Background, reads: int = 6) -> None:
        """Wait until the front has served ``reads`` requests (its outage among them) with
        ``command`` still running: a command that ended at the outage fails here."""
        deadline = time.monotonic() + 10
        while len(self.reads) < reads:
            assert time.monotonic() < deadline and command.thread.is_alive(), (
                self.reads,
                command.code,
            )
            time.sleep(0.05)
