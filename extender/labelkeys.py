"""Kubernetes label keys (pure).

Owns: whether a string is a valid label key by the API server's rules (``IsLabelKey`` in
k8s.io/apimachinery ``pkg/api/validate/content``), with a message saying what is wrong. A label key is
an optional prefix and ``/`` and a name: the prefix a DNS-1123 subdomain of at most 253 characters,
the name 1..63 characters of letters, digits, ``-``, ``_`` and ``.``, starting and ending with a letter
or digit. Settings (``config``) and topology constraints (``cluster.topology_constraints``) both check keys here.
Must not: import anything outside the stdlib.
"""

from __future__ import annotations

import re

HOSTNAME = "kubernetes.io/hostname"
"""The node label whose domains are single nodes: the narrowest topology level."""

MAX_NAME = 63
MAX_PREFIX = 253

_NAME = re.compile(r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?")
_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")


def label_key_problem(key: object) -> str | None:
    """Why ``key`` is not a valid label key (one sentence), or None when it is."""
    if not isinstance(key, str):
        return f"{key!r} is not a valid label key: it must be a string"
    if not key:
        return "'' is not a valid label key: it must not be empty"
    prefix, slash, name = key.rpartition("/")
    if slash and "/" in prefix:
        return f"{key!r} is not a valid label key: it may contain at most one '/'"
    problems = []
    if slash:
        if not prefix:
            problems.append("the prefix before '/' must not be empty")
        elif len(prefix) > MAX_PREFIX:
            problems.append(f"the prefix must be at most {MAX_PREFIX} characters")
        elif not _SUBDOMAIN.fullmatch(prefix):
            problems.append("the prefix must be a DNS subdomain (lowercase letters, digits, '-' and '.', "
                            "e.g. 'example.com')")
    if not name:
        problems.append("the name must not be empty")
    elif len(name) > MAX_NAME:
        problems.append(f"the name must be at most {MAX_NAME} characters")
    elif not _NAME.fullmatch(name):
        problems.append("the name must consist of letters, digits, '-', '_' or '.', and start and end with a "
                        "letter or digit")
    if problems:
        return f"{key!r} is not a valid label key: " + "; ".join(problems)
    return None
