"""AppendOnlyLines: a file that only grows by whole lines, safe against a crash of the process.

Owns: one ``O_APPEND`` descriptor; each line goes out in a single ``write(2)``, so a kill -9 never
leaves half a line for the next process to append to (a buffered file may split a long line over
several writes); the size of the file; emptying it. No fsync: the line survives a crash of the
process, not the loss of the machine. Must not: decide what is written or when to stop (the release
journal and the request recorder do).
"""

from __future__ import annotations

import os
from pathlib import Path


class AppendOnlyLines:
    def __init__(self, path: str | Path, mode: int = 0o644) -> None:
        self.path = Path(path)
        self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, mode)
        self.size = os.fstat(self._fd).st_size

    def append(self, line: bytes) -> int:
        """Write ``line`` (ending in a newline) in one call; the bytes written. Raises OSError."""
        written = os.write(self._fd, line)
        self.size += written
        return written

    def empty(self) -> None:
        """Drop every line. Raises OSError."""
        os.ftruncate(self._fd, 0)
        self.size = 0

    def close(self) -> None:
        os.close(self._fd)
