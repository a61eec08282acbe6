"""Bounded limit/offset pagination for the REST API.

DRF's ``LimitOffsetPagination`` accepts any ``limit`` and ``offset``; a value beyond a 64-bit
integer reaches the database and fails with a 500 (found by the API fuzz test), and a limit or
offset that is not a whole number >= 0 silently falls back to the default (a client asking for
``limit=-1`` got a page it did not ask for). This class caps ``limit`` at ``max_limit`` and
refuses anything else with a 400 naming the parameter.
"""

from __future__ import annotations

from rest_framework.exceptions import ValidationError
from rest_framework.pagination import LimitOffsetPagination
from rest_framework.request import Request

MAX_OFFSET = 2**53  # far beyond any table here, far below SQLite's/PostgreSQL's bigint


def _whole_number(request: Request, name: str, *, low: int) -> int | None:
    """The query parameter ``name`` as an int >= ``low``; None when it is absent or empty."""
    raw = request.query_params.get(name)
    if raw is None or raw == "":
        return None
    if not (raw.isascii() and raw.isdigit()) or int(raw[:20]) < low:
        raise ValidationError({name: [f"must be a whole number >= {low}"]})
    # more digits than any bound here: "huge" (int() of thousands of digits is itself an error)
    return int(raw) if len(raw) <= 18 else MAX_OFFSET + 1


class BoundedLimitOffsetPagination(LimitOffsetPagination):
    max_limit = 1000

    def get_limit(self, request: Request) -> int | None:
        limit = _whole_number(request, self.limit_query_param, low=1)
        if limit is None:
            return self.default_limit
        return min(limit, self.max_limit)

    def get_offset(self, request: Request) -> int:
        offset = _whole_number(request, self.offset_query_param, low=0)
        if offset is None:
            return 0
        if offset > MAX_OFFSET:
            raise ValidationError({self.offset_query_param: [f"must be <= {MAX_OFFSET}"]})
        return offset
