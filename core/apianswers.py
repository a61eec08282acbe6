"""A base for serializers that only declare an answer in the OpenAPI document."""

from __future__ import annotations

from typing import Any

from rest_framework import serializers


class AnswerSerializer(serializers.Serializer[Any]):
    """Declares (part of) an answer in the OpenAPI document and reads no input, so its numbers
    need no bounds: tests/integration/security/test_numeric_bounds.py skips it, and checks from
    the document that no request body reads it."""

    describes_an_answer = True
