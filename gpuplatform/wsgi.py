"""WSGI entry point (HTTP only; production serves ASGI, see asgi.py)."""

import os

from django.core.wsgi import get_wsgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "gpuplatform.settings")
application = get_wsgi_application()
