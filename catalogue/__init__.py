"""The GPU model catalogue: the kinds of GPU the platform knows (name, memory). Tenants' quotas,
the scheduler's nodes and jobs and billing's prices all name a GPU model, so the catalogue sits
below all of them and imports none."""
