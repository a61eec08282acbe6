"""ASGI entry point: HTTP and websockets.

Django's ASGI app is created before importing the websocket routing, because the consumers import
models and the app registry must be ready first.
"""

import os

from django.conf import settings
from django.core.asgi import get_asgi_application

from gpuplatform.startup import exit_on_configuration_error

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "gpuplatform.settings")
# A server that imports this module first is a production start: DEBUG is off unless asked for
# (and settings then refuse to start without the secret key, database and Redis). Where settings
# are already loaded (manage.py: the demo's runserver, the tests) nothing changes.
if not settings.configured:
    os.environ.setdefault("DJANGO_DEBUG", "false")
# A configuration error is one line and exit 2, not a traceback (gpuplatform/startup.py).
django_asgi_app = exit_on_configuration_error(get_asgi_application)

from channels.auth import AuthMiddlewareStack  # noqa: E402
from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402

from frontend.routing import websocket_urlpatterns  # noqa: E402
from gpuplatform.middleware import SameOriginWebsocketValidator  # noqa: E402

application = ProtocolTypeRouter(
    {
        "http": django_asgi_app,
        "websocket": SameOriginWebsocketValidator(
            AuthMiddlewareStack(URLRouter(websocket_urlpatterns))
        ),
    }
)
