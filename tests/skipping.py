"""A skip that cannot go unnoticed: for tests whose tool (Kubernetes binaries, helm, promtool) is missing."""

from __future__ import annotations

import sys
from typing import NoReturn

import pytest


def skip_loudly(reason: str) -> NoReturn:
    """Print ``reason`` in a banner on the real stderr (past pytest's capture), then skip."""
    print(f"\n{'!' * 100}\n{reason}\n{'!' * 100}", file=sys.__stderr__, flush=True)
    pytest.skip(reason)
