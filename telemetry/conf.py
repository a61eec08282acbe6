"""Telemetry settings with their defaults, read at call time (``settings.X`` may be overridden by
the environment or by a test). The project's settings module may set any of these."""

from __future__ import annotations

from typing import Any

from django.conf import settings

from .health import merge_rules

DEFAULTS: dict[str, Any] = {
    # Raw samples: 1,000 nodes x 8 GPUs at 1 Hz is ~690 M rows a day; keep hours, not days.
    "TELEMETRY_RAW_RETENTION_SECONDS": 6 * 3600,
    "TELEMETRY_ROLLUP_RETENTION_SECONDS": 30 * 86400,
    "TELEMETRY_ERROR_RETENTION_SECONDS": 30 * 86400,
    "TELEMETRY_MAX_BATCH_SAMPLES": 5000,
    "TELEMETRY_MAX_FUTURE_SECONDS": 300,
    # Rows (samples plus ECC/XID error events) one node may write per clock minute: about 40x
    # what an 8-GPU node sampling at 1 Hz writes, so a backlog of 100,000 samples drains in
    # five minutes, while a flooding agent (its token is all it needs) is held to about one
    # batch a minute. A batch is taken while the node's count is below it (so any one batch
    # fits); beyond it the answer is a 429, which the agent retries.
    "TELEMETRY_NODE_ROWS_PER_MINUTE": 20_000,
    # A minute is rolled up once this long has passed since its end (late samples get in).
    "TELEMETRY_ROLLUP_SETTLE_SECONDS": 20,
    # Rollups, health and idle evaluation run at most this often (``telemetry_tick``).
    "TELEMETRY_EVALUATE_SECONDS": 60,
    "TELEMETRY_PRUNE_SECONDS": 3600,
    "TELEMETRY_IDLE_UTILIZATION_PCT": 5.0,
    "TELEMETRY_IDLE_WINDOW_SECONDS": 1800,
    # Share of the idle window's minutes that must have telemetry before a job is called idle
    # (missing data is "unknown", never "idle").
    "TELEMETRY_IDLE_MIN_COVERAGE": 0.8,
    "TELEMETRY_HEALTH_RULES": {},
    # How long the token table's marker stays in the cache (telemetry/tokens.py): a node token
    # revoked or deleted by bare SQL, behind Django's back, is refused within this time; one
    # aggregate of the token table per expiry, for all processes together.
    "TELEMETRY_TOKEN_MARKER_SECONDS": 5,
    # Prometheus may scrape /metrics with "Authorization: Bearer <this>" (else admins only).
    "METRICS_BEARER_TOKEN": "",
}


def get(name: str) -> Any:
    """The setting ``name`` (one of ``DEFAULTS``), from settings when present."""
    return getattr(settings, name, DEFAULTS[name])


def health_rules() -> dict[str, Any]:
    """The health rules: the defaults of ``health.DEFAULT_RULES`` with TELEMETRY_HEALTH_RULES
    merged over them, plus the release threshold the loop uses."""
    rules = merge_rules(get("TELEMETRY_HEALTH_RULES"))
    rules["release_min_health"] = getattr(settings, "SCHEDULER_RELEASE_MIN_HEALTH", 0.5)
    return rules
