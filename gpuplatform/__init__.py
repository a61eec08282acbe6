"""The Django project package: wiring only (settings, URLs, ASGI/WSGI, the Celery app).

Named ``gpuplatform`` rather than the design card's ``platform`` because a top-level package called
``platform`` would shadow Python's standard library module that Django, Celery and redis-py import.
"""

from .celery import app as celery_app

__all__ = ("celery_app",)
