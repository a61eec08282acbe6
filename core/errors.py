"""Domain errors. The API's exception handler turns them into 400/404 responses naming the field;
the portal shows them next to the field; the CLI prints them and exits 2."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator


class DomainError(Exception):
    """A request the domain refuses. ``field`` names the input at fault, when there is one."""

    status_code = 400

    def __init__(self, message: str, *, field: str | None = None):
        super().__init__(message)
        self.message = message
        self.field = field

    def as_dict(self) -> dict[str, list[str]]:
        return {self.field or "non_field_errors": [self.message]}


class FieldErrors(DomainError):
    """Several field errors at once (``{field: [messages]}``)."""

    def __init__(self, errors: dict[str, list[str]]):
        first_field, messages = next(iter(errors.items()))
        super().__init__(messages[0], field=first_field)
        self.errors = errors

    def as_dict(self) -> dict[str, list[str]]:
        return self.errors


# Bad entries of lists named one by one in a 400, over the whole request; the rest are counted.
MAX_LISTED_ERRORS = 20


class ListErrors:
    """Errors on the items of lists whose length the sender chooses (a routing's clusters, a
    team's clusters, a dataset's regions and copies): every bad item was named, so 300,000 bad
    names made a 400 body of tens of MB. The first ``limit`` entries of the request are kept in
    ``errors`` under their own path (``copies[3].cluster``); past that, entries are counted per
    list, and :meth:`close` adds one ``and N more not shown`` under the list's name.

    Usage: ``listed = ListErrors(errors)``, ``listed.add("copies", f"copies[{i}].cluster",
    reason)`` for each bad entry, then ``listed.close()`` before raising ``FieldErrors(errors)``.
    """

    def __init__(self, errors: dict[str, list[str]], *, limit: int = MAX_LISTED_ERRORS):
        self.errors = errors
        self.limit = limit
        self.shown = 0
        self.omitted: dict[str, int] = {}

    def add(self, list_name: str, path: str, message: str) -> None:
        if self.shown < self.limit:
            self.errors.setdefault(path, []).append(message)
            self.shown += 1
        else:
            self.omitted[list_name] = self.omitted.get(list_name, 0) + 1

    def close(self) -> None:
        for list_name, count in self.omitted.items():
            self.errors.setdefault(list_name, []).append(f"and {count} more not shown")
        self.omitted = {}


class NotFound(DomainError):
    """The object does not exist or is not visible to the caller (never tell which)."""

    status_code = 404


class Forbidden(DomainError):
    """The caller may see the object but their role does not allow the action (e.g. a viewer
    cancelling their team's job). Another team's object is NotFound, never Forbidden."""

    status_code = 403


class Conflict(DomainError):
    """The object's current state does not allow the action (e.g. cancel a finished job)."""

    status_code = 409


class Unavailable(DomainError):
    """A part the request needs (a cluster's backend) did not answer; retrying later may work."""

    status_code = 503


@contextlib.contextmanager
def duplicate_refused(field: str, message: str) -> Iterator[None]:
    """Run a create in a savepoint; a unique violation becomes FieldErrors on ``field``.

    Services check that a name is new before creating it, but two requests creating the same
    name at once both pass that check: the second then meets the unique constraint, which was a
    500. Other integrity errors are not ours to explain and propagate."""
    from django.db import IntegrityError, transaction

    try:
        with transaction.atomic():
            yield
    except IntegrityError as exc:
        cause = exc.__cause__
        unique = getattr(cause, "sqlstate", None) == "23505" or (
            getattr(cause, "sqlite_errorname", "") == "SQLITE_CONSTRAINT_UNIQUE"
        )
        if not unique:
            raise
        raise FieldErrors({field: [message]}) from None
