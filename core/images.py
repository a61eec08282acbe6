"""What a container image reference may look like. Two families are in use on GPU clusters:

- the OCI reference every registry client and Kubernetes parses
  (``[host[:port]/]path[:tag][@algorithm:hex]``, the path in lower case);
- what Slurm's pyxis plugin (enroot) takes in ``--container-image``: an enroot URI
  (``[user@][registry#]path[:tag]``, the registry after the path's ``#``) or an absolute path to
  a squashfs file on the nodes (``/shared/images/pytorch.sqsh``).

A reference in neither is never pulled: the kubelet fails the pod with ``InvalidImageName`` and
enroot refuses it, after the job has waited its turn, so it is refused when the job is
submitted. The Kubernetes backend refuses the pyxis-only forms when it is asked to start one
(:func:`oci_image_error`)."""

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

# enroot: "[user@]registry#image[:tag]"; the user is a login name, the image an OCI path. Only
# with its "#": without one it is the OCI form ("name@sha256:..." is a digest, not a user).
_ENROOT = re.compile(
    rf"(?:[A-Za-z0-9._-]+@)?{_DOMAIN}#(?P<name>{_COMPONENT}(?:/{_COMPONENT})*)(?::{_TAG})?",
    re.ASCII,
)
# A squashfs file on the nodes: an absolute path of printable, non-space characters.
_SQUASHFS_PATH = re.compile(r"/[!-~]+", re.ASCII)

MAX_NAME_LENGTH = 255


def oci_image_error(reference: str) -> str:
    """Why ``reference`` is not an OCI image reference ("" when it is, or is empty)."""
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


def image_error(reference: str) -> str:
    """Why no cluster could start ``reference`` ("" when one could, or it is empty): an OCI
    reference, or one of the pyxis forms (an enroot URI, a squashfs file's absolute path)."""
    problem = oci_image_error(reference)
    if not problem:
        return ""
    if _SQUASHFS_PATH.fullmatch(reference):
        return ""
    enroot = _ENROOT.fullmatch(reference)
    if enroot is not None:
        if len(enroot["name"]) > MAX_NAME_LENGTH:
            return f"the image name is longer than {MAX_NAME_LENGTH} characters"
        return ""
    return (
        f"{reference[:80]!r} is not an image reference: use [registry[:port]/]path[:tag]"
        "[@sha256:digest] (the path in lower case, without spaces), or for Slurm with pyxis "
        "[user@][registry#]path[:tag] or the absolute path of a squashfs file"
    )
