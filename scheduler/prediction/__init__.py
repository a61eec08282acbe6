"""Run-time prediction from the platform's own history (pure: no Django, no clock, no I/O).

``RuntimeModel`` learns, one finished job at a time, how long jobs of a given team, user, name,
image and shape run, and predicts that for a job before it starts. The live loop
(``scheduler.runtime_prediction``) and the simulator's replays use the same class, so a replay's
accuracy is the loop's. docs/prediction.md says why this model and what it achieves.
"""

from .runtime import JobDescription, RuntimeModel, accuracy, features

__all__ = ["JobDescription", "RuntimeModel", "accuracy", "features"]
