"""AppendOnlyLines: a file that only grows by whole lines, safe against a crash of the process.

Owns: one ``O_APPEND`` descriptor and the file's permission bits (at most those it is given); each
line goes out in a single ``write(2)``, so a kill -9 never leaves half a line for the next process to
append to (a buffered file may split a long line over several writes); the size of the file; emptying
it. No fsync: the line survives a crash of the process, not the loss of the machine. Must not: decide
what is written or when to stop (the release journal and the request recorder do).
"""

from __future__ import annotations

import os
from pathlib import Path


class AppendOnlyLines:
    def __init__(self, path: str | Path, mode: int = 0o644) -> None:
        """Open ``path`` for appending. ``mode``: the permission bits of a file it creates; an existing
        file with bits beyond them is narrowed to them, so a file left by an older version or another
        tool does not keep wider access than this writer grants. Raises OSError (also when the file
        cannot be narrowed: another user's file)."""
        self.path = Path(path)
        self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, mode)
        try:
            status = os.fstat(self._fd)
            if status.st_mode & 0o777 & ~mode:
                os.fchmod(self._fd, status.st_mode & 0o777 & mode)
        except OSError:
            os.close(self._fd)
            raise
        self.size = status.st_size

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
