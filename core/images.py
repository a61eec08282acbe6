"""What a container image reference may look like: the grammar every OCI registry client and
container runtime parses (``[host[:port]/]path[:tag][@algorithm:hex]``, the path in lower case).
A reference outside it is never pulled: the kubelet fails the pod with ``InvalidImageName`` (a
Slurm container plugin likewise), after the job has waited its turn, so it is refused when the
job is submitted."""

from __future__ import annotations

import re

# Written from the grammar of the OCI distribution "reference" format.
_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
_DOMAIN_PART = r"(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])"
_HOST = rf"(?:{_DOMAIN_PART}(?:\.{_DOMAIN_PART})*|\[[0-9a-fA-F:.]+\])"
_DOMAIN = rf"{_HOST}(?::[0-9]+)?"
_NAME = rf"(?:{_DOMAIN}/)?{_COMPONENT}(?:/{_COMPONENT})*"
_TAG = r"[\w][\w.-]{0,127}"
_DIGEST = r"[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{32,}"
_REFERENCE = re.compile(rf"(?P<name>{_NAME})(?::{_TAG})?(?:@{_DIGEST})?", re.ASCII)

MAX_NAME_LENGTH = 255


def image_error(reference: str) -> str:
    """Why ``reference`` is not an image a cluster could pull ("" when it is, or is empty)."""
    if not reference:
        return ""
    match = _REFERENCE.fullmatch(reference)
    if match is None:
        return (
            f"{reference[:80]!r} is not an image reference: use [registry[:port]/]path[:tag]"
            "[@sha256:digest], the path in lower case, without spaces"
        )
    if len(match["name"]) > MAX_NAME_LENGTH:
        return f"the image name is longer than {MAX_NAME_LENGTH} characters"
    return ""
