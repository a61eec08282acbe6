"""Template context: the portal-wide notice of the caller's disabled webhooks (how a hook's owner
learns that deliveries stopped, wherever they are in the portal)."""

from __future__ import annotations

from functools import partial
from typing import Any

from django.http import HttpRequest


def notices(request: HttpRequest) -> dict[str, Any]:
    user = getattr(request, "user", None)
    if not user or not user.is_authenticated or request.path.startswith("/api/"):
        return {}
    from .selectors import disabled_webhooks

    # Lazy: the query runs only when a page shows the notice.
    return {"disabled_webhooks": partial(disabled_webhooks, user=user)}
