"""HTTP calls to the identity provider, each within one total deadline.

requests' ``timeout`` bounds the connect and each socket read, not the call: a provider that
sends one byte every few seconds (in its headers or its body) kept a web worker for as long as it
liked. Here every read of the call's socket waits at most for what is left of the deadline, and
a read that starts past it fails as a read timeout (``requests.ReadTimeout``, one of the provider
failures the callback answers with ``?sso=unavailable``). No thread and no signal: it works in
any worker, sync or in an ASGI thread pool.
"""

from __future__ import annotations

import io
import socket
import time
from typing import Any, cast

import requests
from requests.adapters import HTTPAdapter
from urllib3.connection import HTTPConnection, HTTPSConnection
from urllib3.connectionpool import HTTPConnectionPool, HTTPSConnectionPool


class _DeadlineIO(socket.SocketIO):
    """The socket's reads, each waiting at most until the deadline."""

    def __init__(self, sock: socket.socket, deadline: float):
        super().__init__(sock, "rb")
        self._socket = sock
        self._deadline = deadline

    def readinto(self, buffer: Any) -> int | None:
        left = self._deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError("the identity provider's answer took longer than OIDC_TIMEOUT")
        self._socket.settimeout(left)
        return super().readinto(buffer)


class _DeadlineSocket:
    """The connection's socket as http.client reads the answer from it (``makefile``); all
    else (send, close, TLS details) is the socket's own."""

    def __init__(self, sock: socket.socket, deadline: float):
        self._sock = sock
        self._deadline = deadline

    def makefile(self, mode: str = "rb", *args: Any, **kwargs: Any) -> io.BufferedReader:
        # socket.makefile's bookkeeping: the socket stays open while the answer is being read
        # even once http.client has closed the connection (a "Connection: close" answer).
        reader = _DeadlineIO(self._sock, self._deadline)
        self._sock._io_refs += 1  # type: ignore[attr-defined]
        return io.BufferedReader(reader)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._sock, name)


def _pool_classes(deadline: float) -> dict[str, type]:
    def connection(base: type[HTTPConnection]) -> type[HTTPConnection]:
        class Connection(base):  # type: ignore[valid-type,misc]
            def connect(self) -> None:
                super().connect()
                sock = cast(socket.socket, self.sock)  # type: ignore[has-type]
                self.sock = cast(socket.socket, _DeadlineSocket(sock, deadline))

        return Connection

    http = type("Pool", (HTTPConnectionPool,), {"ConnectionCls": connection(HTTPConnection)})
    https = type("Pool", (HTTPSConnectionPool,), {"ConnectionCls": connection(HTTPSConnection)})
    return {"http": http, "https": https}


class _DeadlineAdapter(HTTPAdapter):
    def __init__(self, deadline: float):
        self._deadline = deadline  # init_poolmanager, called by HTTPAdapter.__init__, reads it
        super().__init__(max_retries=0)

    def init_poolmanager(self, *args: Any, **kwargs: Any) -> None:
        super().init_poolmanager(*args, **kwargs)
        self.poolmanager.pool_classes_by_scheme = _pool_classes(self._deadline)

    def proxy_manager_for(self, proxy: str, **proxy_kwargs: Any) -> Any:
        manager = super().proxy_manager_for(proxy, **proxy_kwargs)
        manager.pool_classes_by_scheme = _pool_classes(self._deadline)
        return manager


def provider_request(method: str, url: str, *, timeout: float, **kwargs: Any) -> requests.Response:
    """``requests.request(method, url, **kwargs)`` answered in full (headers and body) within
    ``timeout`` seconds from now, or ``requests.Timeout`` / ``requests.ConnectionError``.

    A session of its own per call: a pooled connection would carry an earlier call's deadline.
    """
    deadline = time.monotonic() + timeout
    with requests.Session() as session:
        adapter = _DeadlineAdapter(deadline)
        session.mount("http://", adapter)
        session.mount("https://", adapter)
        return session.request(method, url, timeout=timeout, **kwargs)
