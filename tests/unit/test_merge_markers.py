"""No tracked file carries a merge's conflict markers (a merge committed unresolved: docs/deploy.md once
showed both sides of its values table and its RBAC list, "<<<<<<< HEAD" and all)."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
MARKER = re.compile(r"^(<{7}|>{7}) \S", re.MULTILINE)  # git writes "<<<<<<< HEAD", ">>>>>>> branch"


def test_no_tracked_file_has_conflict_markers() -> None:
    files = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, check=True, capture_output=True).stdout
    found = []
    for name in filter(None, files.decode().split("\0")):
        path = ROOT / name
        if not path.is_file():
            continue
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue
        found += [f"{name}:{text.count(chr(10), 0, m.start()) + 1}: {m.group(0)}" for m in MARKER.finditer(text)]
    assert not found, "unresolved merge:\n" + "\n".join(found)
