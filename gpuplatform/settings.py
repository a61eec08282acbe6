"""Settings, all read from the environment (django-environ).

Defaults are the embedded demo: SQLite under var/, in-memory channel layer, the scheduling loop
in-process. Production sets DATABASE_URL, REDIS_URL and DJANGO_SECRET_KEY; with DEBUG off the
platform refuses to start without them rather than run insecurely or on a throwaway database.
"""

import importlib.util
import ipaddress
import json
import logging
from pathlib import Path

import environ
from django.core.exceptions import ImproperlyConfigured

from gpuplatform.envreader import SettingsEnv
from scheduler.policy import SnapshotError, config_deprecations, config_from_dict

BASE_DIR = Path(__file__).resolve().parent.parent
VAR_DIR = BASE_DIR / "var"

env = SettingsEnv()
environ.Env.read_env(BASE_DIR / ".env", overwrite=False) if (BASE_DIR / ".env").exists() else None

DEBUG = env.bool("DJANGO_DEBUG", default=True)

SECRET_KEY = env.str("DJANGO_SECRET_KEY", default="")
REDIS_URL = env.str("REDIS_URL", default="")
if not DEBUG:
    # Named all at once: a new site's first start would otherwise meet them one per try.
    _missing = [
        name
        for name in ("DJANGO_SECRET_KEY", "DATABASE_URL", "REDIS_URL")
        if not env.str(name, default="")
    ]
    if _missing:
        _names = (
            ", ".join(_missing[:-1]) + " and " + _missing[-1] if len(_missing) > 1 else _missing[0]
        )
        raise ImproperlyConfigured(
            f'{_names} must be set when DJANGO_DEBUG is off (docs/deploy.md, "First start")'
        )
if not SECRET_KEY:
    # Only ever used with DEBUG on (demo and tests); never valid in production.
    SECRET_KEY = "insecure-development-key-only-for-debug"

ALLOWED_HOSTS = env.list("DJANGO_ALLOWED_HOSTS", default=["127.0.0.1", "localhost", "testserver"])
# Reverse proxies whose X-Forwarded-For is believed (addresses or networks, e.g. the nginx in
# front of uvicorn); empty: the header is ignored and the peer's address is the client's.
TRUSTED_PROXIES = env.list("TRUSTED_PROXIES", default=[])
for _proxy in TRUSTED_PROXIES:
    try:
        ipaddress.ip_network(_proxy.strip(), strict=False)
    except ValueError:
        raise ImproperlyConfigured(
            f"TRUSTED_PROXIES: {_proxy!r} is not an IP address or network"
        ) from None
CSRF_TRUSTED_ORIGINS = env.list("DJANGO_CSRF_TRUSTED_ORIGINS", default=[])
# A refused form says why in the portal's page (JSON for JSON clients), and names the cause and
# fix of the usual first-start one: HTTPS-only cookies on a portal reached over plain http.
CSRF_FAILURE_VIEW = "gpuplatform.api.csrf_failure"

INSTALLED_APPS = [
    # Django admin, open to platform admins only (tenants.admin_site).
    "tenants.apps.PlatformAdminConfig",
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
    "catalogue",
    "tenants",
    "scheduler",
    "telemetry",
    "billing",
    "notifications",
    "mozilla_django_oidc",
    "frontend",
    "demo",
    "policyversions",
]
# Daphne makes `runserver` an ASGI server with websockets (make demo, the browser tests). It is a
# development dependency: production serves ASGI with uvicorn and its image does not ship daphne.
if importlib.util.find_spec("daphne") is not None:
    INSTALLED_APPS.insert(0, "daphne")

MIDDLEWARE = [
    "telemetry.metrics.RequestLatencyMiddleware",
    "django.middleware.security.SecurityMiddleware",
    "gpuplatform.middleware.SecurityHeadersMiddleware",
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

# Project-wide templates: templates/ at the top of a checkout; inside this package when the
# platform is installed from its wheel (pyproject.toml maps them there).
PROJECT_TEMPLATES_DIR = BASE_DIR / "templates"
if not PROJECT_TEMPLATES_DIR.is_dir():
    PROJECT_TEMPLATES_DIR = Path(__file__).resolve().parent / "templates"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [PROJECT_TEMPLATES_DIR],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
                "tenants.sso.login_options",
                "notifications.context.notices",
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
# Apps keep their static files in <app>/static/ (found by the app directories finder). With DEBUG
# off, collectstatic writes every file a second time under a name carrying a hash of its content
# (app.3f2a9c1b7d4e.css) and templates link those: a browser never runs a stale script after an
# upgrade, and the proxy caches hashed names for a year (docker/nginx.conf). With DEBUG on (demo,
# tests) the plain names are served straight from the apps.
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {
        "BACKEND": (
            "django.contrib.staticfiles.storage.StaticFilesStorage"
            if DEBUG
            else "django.contrib.staticfiles.storage.ManifestStaticFilesStorage"
        )
    },
}

LOGIN_URL = "/login/"
LOGIN_REDIRECT_URL = "/"
LOGOUT_REDIRECT_URL = "/login/"

# Single sign-on with OpenID Connect (mozilla-django-oidc; docs/tenancy.md "Single sign-on").
# On when a client id is set; then every endpoint below must be set too.
OIDC_RP_CLIENT_ID = env.str("OIDC_RP_CLIENT_ID", default="")
SSO_ENABLED = bool(OIDC_RP_CLIENT_ID)
OIDC_RP_CLIENT_SECRET = env.str("OIDC_RP_CLIENT_SECRET", default="")
OIDC_OP_AUTHORIZATION_ENDPOINT = env.str("OIDC_OP_AUTHORIZATION_ENDPOINT", default="")
OIDC_OP_TOKEN_ENDPOINT = env.str("OIDC_OP_TOKEN_ENDPOINT", default="")
OIDC_OP_USER_ENDPOINT = env.str("OIDC_OP_USER_ENDPOINT", default="")
OIDC_OP_JWKS_ENDPOINT = env.str("OIDC_OP_JWKS_ENDPOINT", default="")
# The provider's end_session_endpoint: logout ends the provider's session too (RP-initiated).
OIDC_OP_LOGOUT_ENDPOINT = env.str("OIDC_OP_LOGOUT_ENDPOINT", default="")
# The provider's `issuer` (its discovery document's): when set, an ID token whose `iss` differs is
# refused, so keys a provider shares between organisations (Entra ID's) admit only this one.
OIDC_OP_ISSUER = env.str("OIDC_OP_ISSUER", default="")
OIDC_RP_SIGN_ALGO = env.str("OIDC_RP_SIGN_ALGO", default="RS256")
OIDC_RP_SCOPES = env.str("OIDC_RP_SCOPES", default="openid email profile")
OIDC_GROUPS_CLAIM = env.str("OIDC_GROUPS_CLAIM", default="groups")
OIDC_USERNAME_CLAIM = env.str("OIDC_USERNAME_CLAIM", default="preferred_username")
SSO_PROVIDER_NAME = env.str("SSO_PROVIDER_NAME", default="single sign-on")
OIDC_USE_PKCE = True
OIDC_USE_NONCE = True
OIDC_STORE_ID_TOKEN = True  # the id_token_hint of RP-initiated logout
# Each call to the provider (token, JWKS, userinfo) is answered in full within this, not just
# each socket read (tenants/provider_http.py).
OIDC_TIMEOUT = env.int("OIDC_TIMEOUT_SECONDS", default=10)
# The provider's JWKS is kept this long; a token signed with a key id not in it fetches it again.
OIDC_JWKS_CACHE_SECONDS = env.int("OIDC_JWKS_CACHE_SECONDS", default=600)
# An API token of a single sign-on user works only while the provider confirmed the user (a
# login or a successful session re-check) at most this many days ago: tokens do not go to the
# provider, so without it a user removed from the directory kept using the API with theirs.
# Empty or 0: the rule is off. At most 3650 (ten years; longer is the same as off).
_TOKEN_CONFIRMATION_DAYS_MAX = 3650
_confirmation_days = env.str("OIDC_TOKEN_CONFIRMATION_DAYS", default="30").strip()
try:
    OIDC_TOKEN_CONFIRMATION_DAYS: int | None = (
        int(_confirmation_days) if _confirmation_days else None
    )
except ValueError:
    raise ImproperlyConfigured(
        f"OIDC_TOKEN_CONFIRMATION_DAYS: {_confirmation_days!r} is not a whole number of days"
    ) from None
if OIDC_TOKEN_CONFIRMATION_DAYS is not None and not (
    0 <= OIDC_TOKEN_CONFIRMATION_DAYS <= _TOKEN_CONFIRMATION_DAYS_MAX
):
    raise ImproperlyConfigured(
        f"OIDC_TOKEN_CONFIRMATION_DAYS: must be between 0 (off) and "
        f"{_TOKEN_CONFIRMATION_DAYS_MAX} days, not {OIDC_TOKEN_CONFIRMATION_DAYS}"
    )
OIDC_OP_LOGOUT_URL_METHOD = "tenants.sso.provider_logout_url"
OIDC_AUTHENTICATION_CALLBACK_URL = "oidc_authentication_callback"
LOGIN_REDIRECT_URL_FAILURE = "/login/?sso=failed"
# Where a login goes when the provider could not be reached or answered something unusable.
SSO_UNAVAILABLE_URL = "/login/?sso=unavailable"
if SSO_ENABLED:
    _missing = [
        name
        for name in (
            "OIDC_OP_AUTHORIZATION_ENDPOINT",
            "OIDC_OP_TOKEN_ENDPOINT",
            "OIDC_OP_USER_ENDPOINT",
            "OIDC_OP_JWKS_ENDPOINT",
        )
        if not globals()[name]
    ]
    if _missing:
        raise ImproperlyConfigured(
            f"OIDC_RP_CLIENT_ID is set, so single sign-on needs {', '.join(_missing)} too"
        )
# Local password login (demo users, break-glass admins). Off: the login page shows only the
# single sign-on button and passwords are accepted from platform admins only (break-glass).
LOCAL_LOGIN_ENABLED = env.bool("LOCAL_LOGIN_ENABLED", default=True)
AUTHENTICATION_BACKENDS = ["tenants.sso.LocalPasswordBackend"]
# A single sign-on session is re-checked with the provider (silently, prompt=none) this often, so
# a user removed or moved in the directory loses access or changes teams within this time, not
# when the session cookie expires. Page loads only: the API, websockets and the pages' JSON
# state endpoints are exempt (they cannot follow a redirect to the provider).
OIDC_RENEW_ID_TOKEN_EXPIRY_SECONDS = env.int("OIDC_RENEW_SECONDS", default=900)
SSO_REFRESH_EXEMPT_PATTERNS = [r"/api/", r".*/states?/$", r".*/status/$", r"/metrics", r"/static/"]
if SSO_ENABLED:
    AUTHENTICATION_BACKENDS.append("tenants.sso.SsoBackend")
    MIDDLEWARE.insert(
        MIDDLEWARE.index("django.contrib.auth.middleware.AuthenticationMiddleware") + 1,
        "tenants.sso.SessionRefresh",
    )

REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "tenants.authentication.ApiTokenAuthentication",
        # DRF's, refusing a failed CSRF check with the portal's reason and hint.
        "gpuplatform.csrf.SessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    "DEFAULT_FILTER_BACKENDS": ["django_filters.rest_framework.DjangoFilterBackend"],
    "DEFAULT_PAGINATION_CLASS": "tenants.pagination.BoundedLimitOffsetPagination",
    # JSON bodies through a size- and depth-bounded parser (core/jsonlimits.py).
    "DEFAULT_PARSER_CLASSES": [
        "gpuplatform.api.BoundedJSONParser",
        "rest_framework.parsers.FormParser",
        "rest_framework.parsers.MultiPartParser",
    ],
    "PAGE_SIZE": 100,
    # drf-spectacular's, declaring the error answers too (gpuplatform/apischema.py).
    "DEFAULT_SCHEMA_CLASS": "gpuplatform.apischema.AutoSchema",
    "EXCEPTION_HANDLER": "gpuplatform.api.exception_handler",
    "UNAUTHENTICATED_USER": "django.contrib.auth.models.AnonymousUser",
    # Job submission limits (tenants.throttles); generous so load tests are not throttled.
    "DEFAULT_THROTTLE_RATES": {
        "job_submit_user": env.str("JOB_SUBMIT_RATE_USER", default="100000/min"),
        "job_submit_team": env.str("JOB_SUBMIT_RATE_TEAM", default="100000/min"),
        # Password attempts at the portal's login form and the API's token exchange together:
        # per client address and username, and per client address (tenants.throttles).
        "login": env.str("LOGIN_RATE", default="10/min"),
        "login_address": env.str("LOGIN_ADDRESS_RATE", default="60/min"),
    },
    # Client addresses come from tenants.throttles.client_address (TRUSTED_PROXIES), never
    # from a forwarded header DRF would believe from anyone.
    "NUM_PROXIES": 0,
}

# The largest JSON body the API reads (the proxy's client_max_body_size is 10m as well) and the
# largest frame a websocket client may send (the stream is read-only: frames are never needed).
API_JSON_MAX_BYTES = env.int("API_JSON_MAX_BYTES", default=10 * 1024 * 1024)
WEBSOCKET_FRAME_MAX_BYTES = env.int("WEBSOCKET_FRAME_MAX_BYTES", default=64 * 1024)
# Every open websocket re-checks its session and teams this often (a membership change or a
# logout makes it check at once); see frontend/consumers.py.
STREAM_RECHECK_SECONDS = env.float("STREAM_RECHECK_SECONDS", default=60.0)
# Stream sockets one user may hold per server process (one per open portal page); more are
# closed with 4429. The load benchmark, 1,000 sockets of one session, raises it.
STREAM_MAX_SOCKETS_PER_USER = env.int("STREAM_MAX_SOCKETS_PER_USER", default=32)

# Caps on pending jobs (arrays count by size): per team, and per submitter within a team. A team's
# quota settings may set its own (docs/tenancy.md). They bound the scheduling cycle's work.
JOB_PENDING_MAX_TEAM = env.int("JOB_PENDING_MAX_TEAM", default=20_000)
JOB_PENDING_MAX_USER = env.int("JOB_PENDING_MAX_USER", default=10_000)
# A job interrupted (preempted, its node failed) this many times fails instead of being requeued
# again, as Slurm's MaxBatchRequeue (default 5) stops a job requeued forever; 0 turns it off.
JOB_MAX_INTERRUPTIONS = env.int("JOB_MAX_INTERRUPTIONS", default=5)

SPECTACULAR_SETTINGS = {
    "TITLE": "gpuplatform API",
    "DESCRIPTION": "Submit and manage GPU training jobs, quotas and clusters.",
    "VERSION": "1.0.0",
    "SERVE_INCLUDE_SCHEMA": False,
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
    "COMPONENT_SPLIT_REQUEST": True,
    "ENUM_NAME_OVERRIDES": {
        "StatementStatusEnum": "billing.models.StatementStatus",
        "NotificationEventEnum": "notifications.events.EventKind",
        "WhatIfStatusEnum": "policyversions.models.WhatIfStatus",
        # Jobs and nodes both have a "state": named, or the job states get a hashed name.
        "JobStateEnum": "scheduler.states.JobState",
    },
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
# A what-if replay holds a worker process for minutes to hours: on the loop's queue it would take
# the processes the scheduling cycles run in. Its own queue is served by a worker of its own
# (`-Q whatif`); a worker started without `-Q` reads only the default queue, `celery`
# (docs/deploy.md, "The what-if worker").
# Notification deliveries get a queue of their own too (`-Q notify`): each may wait up to
# NOTIFY_EMAIL/WEBHOOK_TIMEOUT_SECONDS on a relay or receiver, and a burst of them against one
# that hangs held the loop's processes for minutes while its cycles expired in the queue.
CELERY_TASK_ROUTES = {
    "policyversions.tasks.run_whatif": {"queue": "whatif"},
    "notifications.tasks.deliver": {"queue": "notify"},
}

# The scheduling loop.
SCHEDULER_CYCLE_SECONDS = env.float("SCHEDULER_CYCLE_SECONDS", default=3.0)
SCHEDULER_TRIGGER_DEBOUNCE_SECONDS = env.float("SCHEDULER_TRIGGER_DEBOUNCE_SECONDS", default=0.5)
SCHEDULER_IN_PROCESS_LOOP = env.bool("SCHEDULER_IN_PROCESS_LOOP", default=False)
SCHEDULER_QUARANTINE_FAILURES = env.int("SCHEDULER_QUARANTINE_FAILURES", default=3)
SCHEDULER_QUARANTINE_WINDOW_SECONDS = env.float("SCHEDULER_QUARANTINE_WINDOW_SECONDS", default=3600)
SCHEDULER_PROBATION_SECONDS = env.float("SCHEDULER_PROBATION_SECONDS", default=600)
# A running job whose run the cluster keeps pending (Slurm PENDING: a maintenance reservation
# ahead, a QOS limit) is put back in the queue after this long, its run cancelled and nothing
# billed (docs/loop.md). 120 s: Slurm starts a run whose nodes are free at submission or on its
# next scheduling pass (backfill every 30 s, the main pass every 60 s by default), so a run
# still waiting after two passes waits for a reason, and its GPUs are held for nothing.
SCHEDULER_BACKEND_PENDING_GRACE_SECONDS = env.float(
    "SCHEDULER_BACKEND_PENDING_GRACE_SECONDS", default=120
)
# ... and when the reason was about the run's nodes, no new run is placed on them for this long;
# when it was about the job or its account (a QOS limit), the job is not placed again for as long.
SCHEDULER_BACKEND_PENDING_AVOID_SECONDS = env.float(
    "SCHEDULER_BACKEND_PENDING_AVOID_SECONDS", default=600
)
# Policy engine Config fields the live loop changes (a JSON object, docs/policy.md "Config and
# defaults"), e.g. {"las": {"long_run_s": 172800}}. Checked here: a typo stops the start, not a
# cycle; a key of the format before the `las` section still works, logged with its replacement.
try:
    SCHEDULER_POLICY = json.loads(env.str("SCHEDULER_POLICY", default="") or "{}")
    config_from_dict(SCHEDULER_POLICY, path="SCHEDULER_POLICY")
    for _message in config_deprecations(SCHEDULER_POLICY, "SCHEDULER_POLICY"):
        logging.getLogger("gpuplatform.settings").warning("%s", _message)
except json.JSONDecodeError as exc:
    raise ImproperlyConfigured(f"SCHEDULER_POLICY: not JSON ({exc.msg})") from None
except SnapshotError as exc:
    raise ImproperlyConfigured(str(exc)) from None
# The configuration in force comes from the policy history (policyversions, docs/policy.md
# "Versions"); SCHEDULER_POLICY seeds its first version and is the fallback while none is stored.
SCHEDULER_POLICY_SOURCE = "policyversions.selectors.engine_config_in_force"
# Routing across clusters reads the price book in force through this (scheduler.routing_facts).
SCHEDULER_PRICE_BOOK_SOURCE = "billing.selectors.price_book_in_force"
# The policy version number an attempt's reproducibility record names (scheduler.reproducibility).
SCHEDULER_POLICY_VERSION_SOURCE = "policyversions.selectors.version_in_force_number"
SIMULATED_TIME_SCALE = env.float("SIMULATED_TIME_SCALE", default=60.0)
SIMULATED_FAILURE_RATE_PER_NODE_HOUR = env.float(
    "SIMULATED_FAILURE_RATE_PER_NODE_HOUR", default=0.0
)

# Housekeeping run by Celery beat in production and by the in-process loop in the demo:
# (task name, period in seconds). Each task is idempotent, so a late or doubled run is harmless.
PERIODIC_TASKS = [
    ("billing.tasks.meter_run", 60.0),
    # Allocations older than the meter's lookback it never finalized (after an outage): a scan
    # of all cursors, so hourly rather than in every run.
    ("billing.tasks.meter_backlog", 3600.0),
    ("tenants.tasks.expire_quota_requests", 60.0),
    ("telemetry.tick", 60.0),
    ("notifications.tasks.dispatch", env.float("NOTIFY_DISPATCH_SECONDS", default=5.0)),
    ("notifications.tasks.prune", 3600.0),
    # A what-if run whose worker died would otherwise show "running" until the next replay of
    # its cluster, and `gpuctl whatif run` would wait on it for ever.
    ("policyversions.tasks.reap_stale_whatifs", 60.0),
]
# make demo: keep the simulated cluster busy with a trickle of demo users' jobs.
if env.bool("DEMO_WORKLOAD", default=False):
    PERIODIC_TASKS.append(("demo.tasks.demo_workload", 20.0))

# A what-if replay still running after this long is stopped at its next progress report and
# marked failed: a long or overloaded history, or many candidates, could otherwise hold the what-if
# worker for hours (an overloaded 5,000-job history took more than 5 minutes per policy).
WHATIF_MAX_RUNTIME_SECONDS = env.float("WHATIF_MAX_RUNTIME_SECONDS", default=2 * 3600.0)
# The most finished jobs a what-if window may hold: the simulator keeps every job of the window
# in memory for each policy, so a bigger window is refused up front (a 400 naming the window and
# its count), never cut short. 20,000 is four times the 5,000-job history above.
WHATIF_MAX_JOBS = env.int("WHATIF_MAX_JOBS", default=20_000)

# Telemetry (defaults in telemetry; see docs/telemetry.md).
METRICS_BEARER_TOKEN = env.str("METRICS_BEARER_TOKEN", default="")
SCHEDULER_RELEASE_MIN_HEALTH = env.float("SCHEDULER_RELEASE_MIN_HEALTH", default=0.5)
BILLING_IDLE_SOURCE = "telemetry.selectors.billing_idle_fractions"

# Notifications (docs/tenancy.md "Notifications"). Email goes through Django's email backend:
# EMAIL_URL smtp://user:pass@host:587 (smtp+tls://, smtp+ssl://); unset, the console backend.
_email = env.email_url("EMAIL_URL", default="consolemail://")
EMAIL_BACKEND = _email["EMAIL_BACKEND"]
if EMAIL_BACKEND == "django.core.mail.backends.smtp.EmailBackend":
    # Django's bounds each socket read; ours the whole conversation (notifications/smtp.py)
    EMAIL_BACKEND = "notifications.smtp.DeadlineEmailBackend"
EMAIL_HOST = _email.get("EMAIL_HOST") or "localhost"
EMAIL_PORT = _email.get("EMAIL_PORT") or 25
EMAIL_HOST_USER = _email.get("EMAIL_HOST_USER") or ""
EMAIL_HOST_PASSWORD = _email.get("EMAIL_HOST_PASSWORD") or ""
EMAIL_USE_TLS = bool(_email.get("EMAIL_USE_TLS"))
EMAIL_USE_SSL = bool(_email.get("EMAIL_USE_SSL"))
DEFAULT_FROM_EMAIL = env.str("DEFAULT_FROM_EMAIL", default="gpuplatform <gpuplatform@localhost>")
# Where links in messages point (the portal as its users reach it).
PORTAL_URL = env.str("PORTAL_URL", default="http://127.0.0.1:8000")
NOTIFY_GROUP_WINDOW_SECONDS = env.float("NOTIFY_GROUP_WINDOW_SECONDS", default=60.0)
NOTIFY_ARRAY_HOLD_SECONDS = env.float("NOTIFY_ARRAY_HOLD_SECONDS", default=6 * 3600.0)
NOTIFY_MAX_ATTEMPTS = env.int("NOTIFY_MAX_ATTEMPTS", default=5)
NOTIFY_RETRY_BASE_SECONDS = env.float("NOTIFY_RETRY_BASE_SECONDS", default=30.0)
NOTIFY_RETRY_MAX_SECONDS = env.float("NOTIFY_RETRY_MAX_SECONDS", default=3600.0)
NOTIFY_WEBHOOK_DISABLE_AFTER = env.int("NOTIFY_WEBHOOK_DISABLE_AFTER", default=5)
NOTIFY_WEBHOOK_TIMEOUT_SECONDS = env.float("NOTIFY_WEBHOOK_TIMEOUT_SECONDS", default=10.0)
NOTIFY_EMAIL_TIMEOUT_SECONDS = env.float("NOTIFY_EMAIL_TIMEOUT_SECONDS", default=10.0)
# One team's (or person's) webhooks must not hold up everyone's notifications (docs/tenancy.md,
# "Sharing the delivery worker"). GitHub allows 20 hooks per event on a repository; 10 covers a
# team's channels (chat, paging, a bot or two) and bounds what one event fans out to.
NOTIFY_WEBHOOKS_PER_TEAM = env.int("NOTIFY_WEBHOOKS_PER_TEAM", default=10)
NOTIFY_WEBHOOKS_PER_PERSON = env.int("NOTIFY_WEBHOOKS_PER_PERSON", default=10)
# Messages of one owner (a team's webhooks; a person's email and own webhooks) handed to the
# notify worker and not finished yet. At 2 deliveries at a time and a 10 s deadline, another
# owner's message then waits at most 4 x 10 s / 2 = 20 s behind a slow owner's, and a fast owner
# still gets 4 per 5 s dispatch pass (48 a minute).
NOTIFY_IN_FLIGHT_PER_OWNER = env.int("NOTIFY_IN_FLIGHT_PER_OWNER", default=4)
# A hook whose successful answers take over half the deadline this many times in a row is
# flagged to its owners (Slack and GitHub likewise ask receivers to answer first, work after).
NOTIFY_WEBHOOK_SLOW_AFTER = env.int("NOTIFY_WEBHOOK_SLOW_AFTER", default=3)
# Delivered, failed and dropped messages (with their attempts) are kept this long.
NOTIFY_RETENTION_DAYS = env.int("NOTIFY_RETENTION_DAYS", default=90)

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

# Response headers. The portal passes this policy with no violation (the browser tests fail on
# one); a view needing more sets its own (gpuplatform.middleware.content_security_policy).
CONTENT_SECURITY_POLICY = {
    "default-src": "'self'",
    "script-src": "'self'",
    # The hash is that of an empty stylesheet: plotly.js creates empty <style> elements and fills
    # them through the CSSOM, which the policy does not restrict; no inline style with content.
    "style-src": "'self' 'sha256-47DEQpj8HBSa+/TImW+5JCeuQeRkm5NMpJWZG3hSuFU='",
    "img-src": "'self' data:",
    "font-src": "'self'",
    "connect-src": "'self'",
    "object-src": "'none'",
    "base-uri": "'self'",
    "form-action": "'self'",
    "frame-ancestors": "'none'",
    "report-uri": "/csp-report/",
}
if SSO_ENABLED:
    # Logging out posts a form that the platform redirects to the provider's end-session page
    # (and browsers apply form-action to that redirect): the provider's origin is allowed there.
    from urllib.parse import urlsplit

    _provider_origins = sorted(
        {
            f"{parts.scheme}://{parts.netloc}"
            for parts in map(urlsplit, (OIDC_OP_AUTHORIZATION_ENDPOINT, OIDC_OP_LOGOUT_ENDPOINT))
            if parts.scheme and parts.netloc
        }
    )
    CONTENT_SECURITY_POLICY["form-action"] = " ".join(["'self'", *_provider_origins])
# Strict-Transport-Security on HTTPS responses (Django sends it only when the request is secure,
# and uvicorn believes X-Forwarded-Proto only from TRUSTED_PROXIES); 0 turns it off.
SECURE_HSTS_SECONDS = env.int("DJANGO_HSTS_SECONDS", default=0 if DEBUG else 31_536_000)
# For every subdomain too, and asking browsers to preload it: the domain owner's decisions.
SECURE_HSTS_INCLUDE_SUBDOMAINS = env.bool("DJANGO_HSTS_INCLUDE_SUBDOMAINS", default=False)
SECURE_HSTS_PRELOAD = env.bool("DJANGO_HSTS_PRELOAD", default=False)
SECURE_CONTENT_TYPE_NOSNIFF = True
SECURE_REFERRER_POLICY = "same-origin"
X_FRAME_OPTIONS = "DENY"
