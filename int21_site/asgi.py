"""ASGI entry point: Django for HTTP, Channels for the run websockets."""

import os

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "int21_site.settings")

from django.core.asgi import get_asgi_application  # noqa: E402

django_asgi_app = get_asgi_application()  # sets up Django before consumers import models

from channels.auth import AuthMiddlewareStack  # noqa: E402
from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402

from int21_site.origins import SameOriginValidator  # noqa: E402
from swarm.web.routing import websocket_urlpatterns  # noqa: E402

application = ProtocolTypeRouter(
    {
        "http": django_asgi_app,
        "websocket": SameOriginValidator(AuthMiddlewareStack(URLRouter(websocket_urlpatterns))),
    }
)
