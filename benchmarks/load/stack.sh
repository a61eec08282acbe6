#!/usr/bin/env bash
# Start / stop the load-test target: a scratch PostgreSQL database, a Redis DB index other than 0,
# uvicorn with several workers (the production command of docs/deploy.md) and a Celery worker with
# beat, so the scheduling loop runs. Loopback only. Logs and pids in var/load/.
#
#   benchmarks/load/stack.sh start   # create + migrate + seed the database, start the servers
#   benchmarks/load/stack.sh stop    # stop what start started (by pid) and drop the database
#
# Settings (environment): LOAD_DB (gpuplatform_load), LOAD_PG (postgres://postgres@127.0.0.1:5432),
# LOAD_REDIS (redis://127.0.0.1:6379/9), LOAD_PORT (8100), WEB_WORKERS (2), CONN_MAX_AGE (0), POOL_MAX (8),
# FAILURE_RATE (simulated node failures per node-hour, 0).
set -euo pipefail
cd "$(dirname "$0")/../.."
DB=${LOAD_DB:-gpuplatform_load}
PG=${LOAD_PG:-postgres://postgres@127.0.0.1:5432}
RUN=var/load
mkdir -p "$RUN"
export DATABASE_URL="$PG/$DB"
export REDIS_URL=${LOAD_REDIS:-redis://127.0.0.1:6379/9}
export DATABASE_CONN_MAX_AGE=${CONN_MAX_AGE:-0}
# A bounded connection pool per process (0 = none): see docs/deploy.md.
export DATABASE_POOL_MAX_SIZE=${POOL_MAX:-8}
export DJANGO_SETTINGS_MODULE=gpuplatform.settings
export DJANGO_SECRET_KEY=load-test-only-not-secret
export DJANGO_SECURE_COOKIES=false
export LOG_LEVEL=WARNING
export SIMULATED_FAILURE_RATE_PER_NODE_HOUR=${FAILURE_RATE:-0}
# The load generator queues tens of thousands of jobs for a few demo users: lift the pending caps
# (docs/tenancy.md) so the runs measure throughput, not the caps.
export JOB_PENDING_MAX_TEAM=${JOB_PENDING_MAX_TEAM:-1000000}
export JOB_PENDING_MAX_USER=${JOB_PENDING_MAX_USER:-1000000}
# The ws scenario opens up to thousands of sockets of one session.
export STREAM_MAX_SOCKETS_PER_USER=${STREAM_MAX_SOCKETS_PER_USER:-100000}

case "${1:-}" in
start)
    psql "$PG/postgres" -qc "CREATE DATABASE $DB" 2>/dev/null || true
    DJANGO_DEBUG=true .venv/bin/python manage.py migrate -v0
    DJANGO_DEBUG=true .venv/bin/python manage.py seed_demo --jobs 0 >/dev/null
    redis-cli -u "$REDIS_URL" flushdb >/dev/null
    export DJANGO_DEBUG=false  # DEBUG keeps every query in memory: never for load
    # With DEBUG off pages link content-hashed static names, which need collectstatic's manifest.
    export DJANGO_STATIC_ROOT="$RUN/static"
    .venv/bin/python manage.py collectstatic --noinput -v0
    setsid .venv/bin/uvicorn gpuplatform.asgi:application --host 127.0.0.1 \
        --port "${LOAD_PORT:-8100}" --workers "${WEB_WORKERS:-2}" --no-access-log \
        --log-level warning >"$RUN/web.log" 2>&1 &
    echo $! >"$RUN/web.pid"
    setsid .venv/bin/celery -A gpuplatform worker -B -c 1 --loglevel WARNING \
        --schedule "$RUN/celerybeat-schedule" >"$RUN/worker.log" 2>&1 &
    echo $! >"$RUN/worker.pid"
    for _ in $(seq 60); do
        curl -fs -o /dev/null "http://127.0.0.1:${LOAD_PORT:-8100}/login/" && break
        sleep 0.5
    done
    echo "web pid $(cat "$RUN/web.pid"), worker pid $(cat "$RUN/worker.pid")"
    ;;
stop)
    for name in web worker; do
        if [[ -f $RUN/$name.pid ]]; then
            kill -TERM -- "-$(cat "$RUN/$name.pid")" 2>/dev/null || true
            rm -f "$RUN/$name.pid"
        fi
    done
    sleep 3
    if [[ ${KEEP_DB:-0} != 1 ]]; then
        psql "$PG/postgres" -qc "DROP DATABASE IF EXISTS $DB WITH (FORCE)"
        redis-cli -u "$REDIS_URL" flushdb >/dev/null
    fi
    ;;
*)
    echo "usage: $0 start|stop" >&2
    exit 2
    ;;
esac
