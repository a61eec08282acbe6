"""Container health checks for the gpuplatform image: ``python docker/healthcheck.py ROLE``.

Exit 0 when healthy, 1 otherwise (Docker's contract). Standard library only and no Django
import, so a check costs milliseconds and cannot be broken by the thing it checks.
- ``web``: uvicorn answers ``GET /login/`` with 2xx/3xx, sent with a Host from
  DJANGO_ALLOWED_HOSTS so Django's host check accepts it.
- ``beat``: Celery beat rewrote its schedule file within BEAT_HEALTH_MAX_AGE seconds (beat
  syncs it at least every 3 minutes while it runs).
"""

from __future__ import annotations

import glob
import http.client
import os
import sys
import time


def _host() -> str:
    for host in os.environ.get("DJANGO_ALLOWED_HOSTS", "").split(","):
        host = host.strip().lstrip(".")
        if host and host != "*":
            return host
    return "localhost"


def check_web() -> bool:
    """True when the web server answers the login page without an error."""
    connection = http.client.HTTPConnection(
        "127.0.0.1", int(os.environ.get("PORT", "8000")), timeout=5
    )
    try:
        connection.request("GET", "/login/", headers={"Host": _host()})
        status = connection.getresponse().status
    except OSError as exc:
        print(f"web: {exc}", file=sys.stderr)
        return False
    finally:
        connection.close()
    if not 200 <= status < 400:
        print(f"web: GET /login/ answered {status}", file=sys.stderr)
        return False
    return True


def check_beat() -> bool:
    """True when beat's schedule file (any dbm suffix) was written recently."""
    max_age = float(os.environ.get("BEAT_HEALTH_MAX_AGE", "600"))
    files = glob.glob("/tmp/celerybeat-schedule*")
    if not files:
        print("beat: no schedule file yet", file=sys.stderr)
        return False
    age = time.time() - max(os.path.getmtime(f) for f in files)
    if age > max_age:
        print(f"beat: schedule file not written for {age:.0f}s", file=sys.stderr)
        return False
    return True


CHECKS = {"web": check_web, "beat": check_beat}

if __name__ == "__main__":
    if len(sys.argv) != 2 or sys.argv[1] not in CHECKS:
        print(f"usage: healthcheck.py {{{','.join(CHECKS)}}}", file=sys.stderr)
        sys.exit(2)
    sys.exit(0 if CHECKS[sys.argv[1]]() else 1)
