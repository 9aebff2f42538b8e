"""Settings of the Kernel Factory, read once from the environment.

Two modes (see README):

* embedded (default): no ``REDIS_URL``; SQLite in WAL mode under ``var/``, the in-memory
  channel layer and kombu's ``memory://`` transport, one process (``manage.py serve``).
* production: ``REDIS_URL`` set; Redis is the Celery broker and the ``channels_redis`` layer,
  ``DATABASE_URL`` normally points at PostgreSQL, workers run as separate processes.
"""

from __future__ import annotations

import os
from pathlib import Path

import dj_database_url
import plotly
from django.core.exceptions import ImproperlyConfigured

from swarm.learning.credit import endgame_share

BASE_DIR = Path(__file__).resolve().parent.parent
VAR_DIR = Path(os.environ.get("INT21_VAR_DIR", BASE_DIR / "var"))
# var/ holds the embedded database and collected static files; ServeStatic warns if it is missing.
# The SQLite database (auth tokens included), its WAL and the collected static files: this
# service's user only. Sandboxed candidates and the compiler run as another user
# (KERNELS_SANDBOX_USER) and may read what is world-readable.
(VAR_DIR / "static").mkdir(parents=True, exist_ok=True)
try:
    VAR_DIR.chmod(0o700)
except OSError:  # not ours to change: its owner decides
    pass


def env_str(name: str, default: str = "") -> str:
    return os.environ.get(name, default)


def env_bool(name: str, default: bool = False) -> bool:
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return default
    if raw.lower() in ("1", "true", "yes", "on"):
        return True
    if raw.lower() in ("0", "false", "no", "off"):
        return False
    raise ImproperlyConfigured(f"{name}={raw!r}: expected one of 1/0, true/false, yes/no, on/off")


def env_int(name: str, default: int) -> int:
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return default
    try:
        return int(raw)
    except ValueError:
        raise ImproperlyConfigured(f"{name}={raw!r}: expected an integer") from None


def env_float(name: str, default: float) -> float:
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return default
    try:
        return float(raw)
    except ValueError:
        raise ImproperlyConfigured(f"{name}={raw!r}: expected a number") from None


DEBUG = env_bool("DEBUG", False)
SECRET_KEY = env_str("SECRET_KEY") or "int21-embedded-insecure-key-set-SECRET_KEY-in-production"
ALLOWED_HOSTS = [h for h in env_str("ALLOWED_HOSTS", "127.0.0.1,localhost,[::1]").split(",") if h]
CSRF_TRUSTED_ORIGINS = [o for o in env_str("CSRF_TRUSTED_ORIGINS").split(",") if o]

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "servestatic",  # its configuration checks
    "django.contrib.staticfiles",
    "rest_framework",
    "rest_framework.authtoken",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    "swarm.apps.SwarmConfig",
    "swarm.engine_registry.apps.EngineRegistryConfig",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "int21_site.static_middleware.StaticFilesMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
]

ROOT_URLCONF = "int21_site.urls"
ASGI_APPLICATION = "int21_site.asgi.application"

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

# --- database -------------------------------------------------------------------------------
DATABASE_URL = env_str("DATABASE_URL") or f"sqlite:///{VAR_DIR / 'factory.sqlite3'}"
try:
    _db = dj_database_url.parse(DATABASE_URL, conn_max_age=env_int("DB_CONN_MAX_AGE", 0))
except Exception as exc:  # dj-database-url raises a bare ValueError/KeyError on bad schemes
    raise ImproperlyConfigured(f"DATABASE_URL={DATABASE_URL!r} is not a database URL: {exc}") from exc
if _db["ENGINE"] == "django.db.backends.sqlite3":
    # WAL lets the web process read while the embedded worker writes; IMMEDIATE transactions
    # avoid "database is locked" upgrades from read to write locks.
    _db["OPTIONS"] = {
        "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
        "transaction_mode": "IMMEDIATE",
        "timeout": 30,
    }
    # A file (not :memory:) so that server and worker processes started by tests share it;
    # one per test session so that concurrent sessions in one checkout do not collide.
    _db["TEST"] = {"NAME": str(VAR_DIR / f"test-{os.getpid()}.sqlite3")}
DATABASES = {"default": _db}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

# --- broker and channel layer ---------------------------------------------------------------
REDIS_URL = env_str("REDIS_URL")
EMBEDDED = not REDIS_URL

CELERY_BROKER_URL = REDIS_URL or "memory://localhost/"  # a host named: kombu warns on every connection without one
CELERY_BROKER_TRANSPORT_OPTIONS = (
    {"visibility_timeout": env_int("CELERY_VISIBILITY_TIMEOUT_S", 3600)}
    if REDIS_URL
    else {"polling_interval": 0.05}
)
CELERY_TASK_IGNORE_RESULT = True
CELERY_TASK_ACKS_LATE = True  # a worker killed mid-task leaves the task to be redelivered
CELERY_TASK_REJECT_ON_WORKER_LOST = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_TASK_DEFAULT_QUEUE = "control"
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True

if REDIS_URL:
    from channels_redis.core import RedisChannelLayer

    # A websocket's consumer waits for its next message with BZPOPMIN for brpop_timeout (5 s) at a
    # time; redis-py's socket read timeout (5 s by default since redis 8) must outlast that wait,
    # or every quiet socket fails with TimeoutError. It also bounds how long a dead Redis
    # goes unnoticed.
    CHANNELS_SOCKET_TIMEOUT_S = env_float("CHANNELS_SOCKET_TIMEOUT_S", RedisChannelLayer.brpop_timeout + 10.0)
    if CHANNELS_SOCKET_TIMEOUT_S <= RedisChannelLayer.brpop_timeout:
        raise ImproperlyConfigured(
            f"CHANNELS_SOCKET_TIMEOUT_S={CHANNELS_SOCKET_TIMEOUT_S} must exceed channels_redis's "
            f"{RedisChannelLayer.brpop_timeout} s wait for a message"
        )
    CHANNEL_LAYERS = {
        "default": {
            "BACKEND": "channels_redis.core.RedisChannelLayer",
            "CONFIG": {
                "hosts": [{
                    "address": REDIS_URL,
                    "socket_timeout": CHANNELS_SOCKET_TIMEOUT_S,
                    "socket_connect_timeout": 5.0,
                    "socket_keepalive": True,
                    "health_check_interval": 30,  # PING a connection idle this long (s) before use
                }],
                "prefix": env_str("CHANNELS_PREFIX", "int21"),
                # Messages waiting per websocket. A run's burst is a generation's proposals and
                # then one event per evaluation, from every worker at once; beyond this the event
                # is dropped (logged as a warning naming the run) and the page fetches it from
                # /api/runs/<id>/events/.
                "capacity": env_int("CHANNELS_CAPACITY", 2000),
                # Seconds a message waits for its consumer; an older one is dropped (and fetched
                # by the page): a page that far behind reads faster from the API.
                "expiry": env_int("CHANNELS_EXPIRY_S", 60),
                # Seconds a websocket stays in its run's group without joining again; the
                # consumer joins again after half of it.
                "group_expiry": env_int("CHANNELS_GROUP_EXPIRY_S", 86400),
            },
        }
    }
else:
    CHANNEL_LAYERS = {"default": {"BACKEND": "channels.layers.InMemoryChannelLayer"}}

# --- evaluation -----------------------------------------------------------------------------
EVAL_TIMEOUT_S = env_float("EVAL_TIMEOUT_S", 60.0)
# Paired comparisons (compare page, promotion): kernels.comparison.paired.PairSettings fields, and
# "noise_floor" to judge against a given floor instead of the target's stored one. Empty: the
# library's defaults (8 rounds of at least 15 timed calls per side and shape).
PAIRED_COMPARISON: dict = {}
SWARM_SWEEP_EVERY_S = env_float("SWARM_SWEEP_EVERY_S", 60.0)  # recovery of lost work; 0 disables
SWARM_UCB_EXPLORATION = env_float("SWARM_UCB_EXPLORATION", 0.3)  # UCB1 exploration weight of the agent bandit
# Share of a run's budget, its last evaluations, that goes to the agents that climb from the best
# points (swarm.learning.credit.endgame_evaluations); 0: none.
try:
    SWARM_ENDGAME_SHARE = endgame_share(os.environ.get("SWARM_ENDGAME_SHARE"))
except ValueError as exc:
    raise ImproperlyConfigured(str(exc)) from None
# Four eyes: an approver cannot approve a promotion they requested; a request waits
# ("awaiting") until another approver approves it. On in production mode, off when embedded
# (the demo user promotes alone).
PROMOTION_FOUR_EYES = env_bool("PROMOTION_FOUR_EYES", not EMBEDDED)

# --- LLM agents (OpenAI-compatible endpoint) --------------------------------------------------
LLM_BASE_URL = env_str("LLM_BASE_URL", "https://api.openai.com/v1")
LLM_API_KEY = env_str("LLM_API_KEY")
LLM_MODEL = env_str("LLM_MODEL", "gpt-4o-mini")

# --- auth, static, i18n ---------------------------------------------------------------------
LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "goal-list"
LOGOUT_REDIRECT_URL = "login"

AUTH_PASSWORD_VALIDATORS = []  # internal tool behind SSO in production; demo user has a short password

STATIC_URL = "/static/"
STATIC_ROOT = VAR_DIR / "static"
# plotly.js is served from the installed plotly package (no CDN): /static/plotly/plotly.min.js
STATICFILES_DIRS = [BASE_DIR / "static", ("plotly", Path(plotly.__file__).parent / "package_data")]
# Two ways to serve static files. Development and tests (SERVESTATIC_USE_FINDERS=1, the default):
# from the app's static dir and the plotly package as they are, under their plain names.
# Collected (scripts/demo, production: SERVESTATIC_USE_FINDERS=0, for collectstatic and the
# server alike): from STATIC_ROOT, under content-hashed names from collectstatic's manifest, which
# ServeStatic serves with a far-future "immutable" Cache-Control (a returning visit downloads
# nothing, a changed file gets a new name), with the gzip copies collectstatic wrote
# (plotly.min.js: 1.5 MB instead of 4.8 MB), and relative ES module imports rewritten to the
# hashed names (int21_site/static_storage.py). Hashed names need the manifest, hence the switch.
# WHITENOISE_USE_FINDERS, its earlier name, is still read when the new one is not set.
SERVESTATIC_USE_FINDERS = env_bool("SERVESTATIC_USE_FINDERS" if os.environ.get("SERVESTATIC_USE_FINDERS")
                                   else "WHITENOISE_USE_FINDERS", True)
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {"BACKEND": "servestatic.storage.CompressedStaticFilesStorage" if SERVESTATIC_USE_FINDERS
                    else "int21_site.static_storage.ManifestStorage"},
}
SERVESTATIC_AUTOREFRESH = DEBUG

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = False
USE_TZ = True

# --- API (Django REST framework): session or token auth, OpenAPI schema by drf-spectacular ---
# Largest request body read into memory (bytes; Django's default, 2.5 MiB); a larger one gets a
# 400 that gives the limit (JSON under /api/, a page elsewhere: int21_site.errors).
DATA_UPLOAD_MAX_MEMORY_SIZE = env_int("DATA_UPLOAD_MAX_MEMORY_SIZE", 2_621_440)

REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "rest_framework.authentication.SessionAuthentication",
        "rest_framework.authentication.TokenAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["swarm.web.api.permissions.RolePermission"],
    # JSON everywhere, browsers included (the interactive documentation is /api/docs/)
    "DEFAULT_RENDERER_CLASSES": ["rest_framework.renderers.JSONRenderer"],
    "DEFAULT_PARSER_CLASSES": ["swarm.web.api.parsers.JSONParser", "rest_framework.parsers.FormParser",
                               "rest_framework.parsers.MultiPartParser"],
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "DEFAULT_PAGINATION_CLASS": "rest_framework.pagination.LimitOffsetPagination",
    "PAGE_SIZE": 100,
    "URL_FORMAT_OVERRIDE": None,
}
SPECTACULAR_SETTINGS = {
    "TITLE": "INT21 Kernel Factory API",
    "DESCRIPTION": "Goals, runs, candidates, evidence, insights, directions, promotions and production kernels.",
    "VERSION": "1",
    "SERVE_INCLUDE_SCHEMA": False,
    "SWAGGER_UI_DIST": "SIDECAR",  # served from the installed package: no CDN
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
}

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "filters": {"channels_over_capacity": {"()": "int21_site.channel_log.OverCapacityAsWarning"}},
    "handlers": {"console": {"class": "logging.StreamHandler"}},
    "root": {"handlers": ["console"], "level": "WARNING"},
    "loggers": {
        # INFO so that the filter sees channels_redis's report of dropped messages (it passes
        # only that, as a warning naming the run, and records at WARNING and above)
        "channels_redis.core": {"handlers": ["console"], "level": "INFO", "filters": ["channels_over_capacity"],
                                "propagate": False},
        "swarm": {"handlers": ["console"], "level": env_str("LOG_LEVEL", "INFO"), "propagate": False},
        "django.request": {"handlers": ["console"], "level": "ERROR", "propagate": False},
    },
}
