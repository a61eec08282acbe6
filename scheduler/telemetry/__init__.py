"""GPU telemetry: ingest from node agents, retention, health scoring, quarantine rules, the node
agent itself (``python -m scheduler.telemetry.agent``) and the Prometheus ``/metrics`` endpoint."""
