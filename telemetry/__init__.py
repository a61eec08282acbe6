"""GPU telemetry: ingest from node agents (the agent itself is the ``gpuagent`` package at the top of
the checkout), retention, health scoring, quarantine rules and the Prometheus ``/metrics``
endpoint."""
