"""Request guards that apply to every view (wiring, no domain logic)."""

from __future__ import annotations

from django.http import JsonResponse


class RejectNulBytesMiddleware:
    """Answer 400 to a query string or form field containing a NUL byte.

    PostgreSQL text cannot hold NUL, so such a value reaching a filter or a form would end as a
    500 (DataError); refusing it up front names the field instead.
    """

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        sources = [request.GET, request.POST] if _is_form(request) else [request.GET]
        for source in sources:
            for key, values in source.lists():
                if "\x00" in key or any("\x00" in value for value in values):
                    return JsonResponse(
                        {key.replace("\x00", "\\0"): ["must not contain NUL (0x00) characters"]},
                        status=400,
                    )
        return self.get_response(request)


def _is_form(request) -> bool:
    content_type = request.META.get("CONTENT_TYPE", "")
    return request.method == "POST" and (
        content_type.startswith("application/x-www-form-urlencoded")
        or content_type.startswith("multipart/form-data")
    )
