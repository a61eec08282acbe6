"""Settings, all read from the environment (django-environ).

Defaults are the embedded demo: SQLite under var/, in-memory channel layer, the scheduling loop
in-process. Production sets DATABASE_URL, REDIS_URL and DJANGO_SECRET_KEY; with DEBUG off the
platform refuses to start without them rather than run insecurely or on a throwaway database.
"""

import json
from pathlib import Path

import environ
from django.core.exceptions import ImproperlyConfigured

from scheduler.policy import SnapshotError, config_from_dict

BASE_DIR = Path(__file__).resolve().parent.parent
VAR_DIR = BASE_DIR / "var"

env = environ.Env()
environ.Env.read_env(BASE_DIR / ".env", overwrite=False) if (BASE_DIR / ".env").exists() else None

DEBUG = env.bool("DJANGO_DEBUG", default=True)

SECRET_KEY = env.str("DJANGO_SECRET_KEY", default="")
if not SECRET_KEY:
    if not DEBUG:
        raise ImproperlyConfigured("DJANGO_SECRET_KEY must be set when DJANGO_DEBUG is off")
    # Only ever used with DEBUG on (demo and tests); never valid in production.
    SECRET_KEY = "insecure-development-key-only-for-debug"

REDIS_URL = env.str("REDIS_URL", default="")
if not DEBUG:
    for required in ("DATABASE_URL", "REDIS_URL"):
        if not env.str(required, default=""):
            raise ImproperlyConfigured(f"{required} must be set when DJANGO_DEBUG is off")

ALLOWED_HOSTS = env.list("DJANGO_ALLOWED_HOSTS", default=["127.0.0.1", "localhost", "testserver"])
CSRF_TRUSTED_ORIGINS = env.list("DJANGO_CSRF_TRUSTED_ORIGINS", default=[])

INSTALLED_APPS = [
    "daphne",
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "rest_framework",
    "django_filters",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    "channels",
    "tenants",
    "scheduler",
    "scheduler.telemetry",
    "billing",
    "frontend",
]

MIDDLEWARE = [
    "scheduler.metrics.RequestLatencyMiddleware",
    "django.middleware.security.SecurityMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "gpuplatform.middleware.RejectNulBytesMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
]

ROOT_URLCONF = "gpuplatform.urls"
WSGI_APPLICATION = "gpuplatform.wsgi.application"
ASGI_APPLICATION = "gpuplatform.asgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]

DATABASES = {
    "default": env.db("DATABASE_URL", default=f"sqlite:///{VAR_DIR / 'gpuplatform.sqlite3'}")
}
DATABASES["default"]["CONN_MAX_AGE"] = env.int("DATABASE_CONN_MAX_AGE", default=0)
DATABASES["default"]["CONN_HEALTH_CHECKS"] = True
# A per-process connection pool for PostgreSQL under a threaded ASGI server: persistent
# per-thread connections exhausted PostgreSQL's max_connections under load (docs/deploy.md).
_POOL_MAX = env.int("DATABASE_POOL_MAX_SIZE", default=0)
if _POOL_MAX > 0 and DATABASES["default"]["ENGINE"] == "django.db.backends.postgresql":
    DATABASES["default"]["CONN_MAX_AGE"] = 0
    DATABASES["default"].setdefault("OPTIONS", {})["pool"] = {
        "min_size": env.int("DATABASE_POOL_MIN_SIZE", default=2),
        "max_size": _POOL_MAX,
        "timeout": env.float("DATABASE_POOL_TIMEOUT", default=10.0),
    }
if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    # WAL + a busy timeout let the in-process loop and request threads share the file.
    DATABASES["default"]["OPTIONS"] = {
        "timeout": 20,
        "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
        "transaction_mode": "IMMEDIATE",
    }
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
]
LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

STATIC_URL = "/static/"
STATIC_ROOT = env.str("DJANGO_STATIC_ROOT", default=str(BASE_DIR / "staticfiles"))
STATICFILES_DIRS = [BASE_DIR / "frontend" / "static"]

LOGIN_URL = "/login/"
LOGIN_REDIRECT_URL = "/"
LOGOUT_REDIRECT_URL = "/login/"

REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "tenants.authentication.ApiTokenAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    "DEFAULT_FILTER_BACKENDS": ["django_filters.rest_framework.DjangoFilterBackend"],
    "DEFAULT_PAGINATION_CLASS": "tenants.pagination.BoundedLimitOffsetPagination",
    "PAGE_SIZE": 100,
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "EXCEPTION_HANDLER": "gpuplatform.api.exception_handler",
    "UNAUTHENTICATED_USER": "django.contrib.auth.models.AnonymousUser",
    # Job submission limits (tenants.throttles); generous so load tests are not throttled.
    "DEFAULT_THROTTLE_RATES": {
        "job_submit_user": env.str("JOB_SUBMIT_RATE_USER", default="100000/min"),
        "job_submit_team": env.str("JOB_SUBMIT_RATE_TEAM", default="100000/min"),
        "token_exchange": env.str("TOKEN_EXCHANGE_RATE", default="60/min"),
    },
}

SPECTACULAR_SETTINGS = {
    "TITLE": "gpuplatform API",
    "DESCRIPTION": "Submit and manage GPU training jobs, quotas and clusters.",
    "VERSION": "1.0.0",
    "SERVE_INCLUDE_SCHEMA": False,
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
    "COMPONENT_SPLIT_REQUEST": True,
    "ENUM_NAME_OVERRIDES": {"StatementStatusEnum": "billing.models.StatementStatus"},
}

if REDIS_URL:
    CHANNEL_LAYERS = {
        "default": {
            "BACKEND": "channels_redis.core.RedisChannelLayer",
            # Each web process has one listener that receives every group's messages
            # (frontend/hub.py), so its channel must hold a burst across many teams.
            "CONFIG": {
                "hosts": [REDIS_URL],
                "capacity": env.int("CHANNEL_LAYER_CAPACITY", default=1000),
            },
        }
    }
    CACHES = {
        "default": {
            "BACKEND": "gpuplatform.cache.ProcessSharedRedisCache",
            "LOCATION": REDIS_URL,
        }
    }
else:
    CHANNEL_LAYERS = {"default": {"BACKEND": "channels.layers.InMemoryChannelLayer"}}
    CACHES = {"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}}

# Celery: with Redis it is the broker; without it tasks run eagerly in-process (the demo).
CELERY_BROKER_URL = REDIS_URL or "memory://"
CELERY_RESULT_BACKEND = None
CELERY_TASK_ALWAYS_EAGER = not REDIS_URL
CELERY_TASK_EAGER_PROPAGATES = True
CELERY_TASK_ACKS_LATE = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
CELERY_TIMEZONE = "UTC"

# The scheduling loop.
SCHEDULER_CYCLE_SECONDS = env.float("SCHEDULER_CYCLE_SECONDS", default=3.0)
SCHEDULER_TRIGGER_DEBOUNCE_SECONDS = env.float("SCHEDULER_TRIGGER_DEBOUNCE_SECONDS", default=0.5)
SCHEDULER_IN_PROCESS_LOOP = env.bool("SCHEDULER_IN_PROCESS_LOOP", default=False)
SCHEDULER_QUARANTINE_FAILURES = env.int("SCHEDULER_QUARANTINE_FAILURES", default=3)
SCHEDULER_QUARANTINE_WINDOW_SECONDS = env.float("SCHEDULER_QUARANTINE_WINDOW_SECONDS", default=3600)
SCHEDULER_PROBATION_SECONDS = env.float("SCHEDULER_PROBATION_SECONDS", default=600)
# Policy engine Config fields the live loop changes (a JSON object, docs/policy.md "Config and
# defaults"), e.g. {"las_long_run_s": 172800}. Checked here: a typo stops the start, not a cycle.
try:
    SCHEDULER_POLICY = json.loads(env.str("SCHEDULER_POLICY", default="") or "{}")
    config_from_dict(SCHEDULER_POLICY, path="SCHEDULER_POLICY")
except json.JSONDecodeError as exc:
    raise ImproperlyConfigured(f"SCHEDULER_POLICY: not JSON ({exc.msg})") from None
except SnapshotError as exc:
    raise ImproperlyConfigured(str(exc)) from None
SIMULATED_TIME_SCALE = env.float("SIMULATED_TIME_SCALE", default=60.0)
SIMULATED_FAILURE_RATE_PER_NODE_HOUR = env.float(
    "SIMULATED_FAILURE_RATE_PER_NODE_HOUR", default=0.0
)

# Housekeeping run by Celery beat in production and by the in-process loop in the demo:
# (task name, period in seconds). Each task is idempotent, so a late or doubled run is harmless.
PERIODIC_TASKS = [
    ("billing.tasks.meter_run", 60.0),
    ("tenants.tasks.expire_quota_requests", 60.0),
    ("telemetry.tick", 60.0),
]
# make demo: keep the simulated cluster busy with a trickle of demo users' jobs.
if env.bool("DEMO_WORKLOAD", default=False):
    PERIODIC_TASKS.append(("scheduler.tasks.demo_workload", 20.0))

# Telemetry (defaults in scheduler/telemetry; see docs/telemetry.md).
METRICS_BEARER_TOKEN = env.str("METRICS_BEARER_TOKEN", default="")
SCHEDULER_RELEASE_MIN_HEALTH = env.float("SCHEDULER_RELEASE_MIN_HEALTH", default=0.5)
BILLING_IDLE_SOURCE = "scheduler.telemetry.selectors.billing_idle_fractions"

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s %(message)s"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain"}},
    "root": {"handlers": ["console"], "level": env.str("LOG_LEVEL", default="INFO")},
    "loggers": {"django.db.backends": {"level": "WARNING"}},
}

if not DEBUG:
    SESSION_COOKIE_SECURE = env.bool("DJANGO_SECURE_COOKIES", default=True)
    CSRF_COOKIE_SECURE = env.bool("DJANGO_SECURE_COOKIES", default=True)
