#!/bin/sh
# gpuplatform container entrypoint: the first argument picks the role. Every role ends in `exec`,
# so the server process is PID 1's child directly and receives SIGTERM from `docker stop`.
set -eu

role="${1:-web}"
if [ "$#" -gt 0 ]; then
    shift
fi

# The roles that load Django's settings check them first: a configuration error (a missing
# DJANGO_SECRET_KEY, ...) is one line and exit 2 (gpuplatform/startup.py). Without it uvicorn's
# supervisor restarted the web workers that failed to import the app, for ever, a traceback each.
case "$role" in
    web|worker|beat)
        python -m gpuplatform.startup
        ;;
esac

case "$role" in
    web)
        # Publish the static files collected at build time to the proxy's volume, when mounted.
        if [ -n "${STATIC_PUBLISH_DIR:-}" ] && [ -d "$STATIC_PUBLISH_DIR" ]; then
            cp -R "$DJANGO_STATIC_ROOT"/. "$STATIC_PUBLISH_DIR"/
        fi
        # One uvicorn worker process per core (WEB_CONCURRENCY): a single ASGI process runs
        # Python on one core. Websockets work across workers through the Redis channel layer.
        # X-Forwarded-For/-Proto are believed from TRUSTED_PROXIES only (the nginx in front);
        # with none configured they are ignored (docs/deploy.md, "Proxies and client addresses").
        if [ -n "${TRUSTED_PROXIES:-}" ]; then
            set -- --proxy-headers --forwarded-allow-ips "$TRUSTED_PROXIES" "$@"
        else
            set -- --no-proxy-headers "$@"
        fi
        exec uvicorn gpuplatform.asgi:application --host 0.0.0.0 --port "${PORT:-8000}" \
            --workers "${WEB_CONCURRENCY:-2}" --no-access-log "$@"
        ;;
    worker)
        exec celery -A gpuplatform worker --loglevel "${LOG_LEVEL:-INFO}" \
            --concurrency "${CELERY_CONCURRENCY:-2}" "$@"
        ;;
    beat)
        # The schedule file lives in /tmp: the code directory is read-only for the app user.
        exec celery -A gpuplatform beat --loglevel "${LOG_LEVEL:-INFO}" \
            --schedule /tmp/celerybeat-schedule "$@"
        ;;
    migrate)
        exec python manage.py migrate --noinput "$@"
        ;;
    agent)
        # The node agent (gpuagent); it reads GPUPLATFORM_URL and GPUPLATFORM_NODE_TOKEN.
        exec gpuagent "$@"
        ;;
    manage)
        exec python manage.py "$@"
        ;;
    gpuctl)
        exec gpuctl "$@"
        ;;
    *)
        exec "$role" "$@"
        ;;
esac
