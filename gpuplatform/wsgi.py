"""WSGI entry point (HTTP only; production serves ASGI, see asgi.py)."""

import os

from django.conf import settings
from django.core.wsgi import get_wsgi_application

from gpuplatform.startup import exit_on_configuration_error

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "gpuplatform.settings")
# A server that imports this module first is a production start: DEBUG is off unless asked for
# (and settings then refuse to start without the secret key, database and Redis). Where settings
# are already loaded (manage.py: the demo's runserver, the tests) nothing changes.
if not settings.configured:
    os.environ.setdefault("DJANGO_DEBUG", "false")
# A configuration error is one line and exit 2, not a traceback (gpuplatform/startup.py).
application = exit_on_configuration_error(get_wsgi_application)
