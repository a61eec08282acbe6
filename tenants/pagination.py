"""Bounded limit/offset pagination for the REST API.

DRF's ``LimitOffsetPagination`` accepts any ``limit`` and ``offset``; a value beyond a 64-bit
integer reaches the database and fails with a 500 (found by the API fuzz test). This class caps
``limit`` at ``max_limit`` and refuses an absurd ``offset`` with a 400 naming the parameter.
"""

from __future__ import annotations

from rest_framework.exceptions import ValidationError
from rest_framework.pagination import LimitOffsetPagination

MAX_OFFSET = 2**53  # far beyond any table here, far below SQLite's/PostgreSQL's bigint


class BoundedLimitOffsetPagination(LimitOffsetPagination):
    max_limit = 1000

    def get_offset(self, request):
        offset = super().get_offset(request)
        if offset > MAX_OFFSET:
            raise ValidationError({self.offset_query_param: [f"must be <= {MAX_OFFSET}"]})
        return offset
