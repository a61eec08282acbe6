"""The scheduling loop, one module per stage (docs/loop.md):

- ``observe``: what the backends report (finished runs, node failures, checkpoints, quarantine
  and probation, stale runs) and live rows no engine can read, written to the database;
- ``decide``: the snapshot of the database in, the pure policy engine's decisions out;
- ``apply``: the decisions written in one transaction;
- ``enforce``: after commit, each backend made to match the database;
- ``cycle``: one run of the four under the single-flight lock; ``inprocess`` runs cycles in a
  thread for the embedded demo, ``scheduler.tasks`` as Celery tasks in production.

Every job state change the stages make goes through ``scheduler.transitions``. The stages import
one way: cycle → observe, decide, apply, enforce; none imports the cycle.
"""
