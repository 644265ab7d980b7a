"""Atomic writes: a reader, a resumed run or a crashed one sees the old file or the new one, never half
of one.

The content goes to a temporary file beside the target (same directory, so the same filesystem), which
``os.replace`` then renames over the target: a rename within one filesystem is atomic on POSIX, so a
kill at any point leaves either the old target or the new one. The temporary file's name carries the
writer's PID (two processes writing the same target never share one) and is removed on *any* failure,
a full disk or a Ctrl-C included, so no ``.tmp`` files are left behind. Durability across a power loss
(fsync) is not promised: the records are results, not a database.
"""

from __future__ import annotations

import errno
import os
from collections.abc import Callable
from pathlib import Path


class DiskFull(OSError):
    """No space left for a record file: which file, and how many bytes it needed (an estimate for a
    checkpoint: the size of the one before it)."""

    def __init__(self, path: Path, needed: int | None, at_least: bool = False):
        self.path, self.needed, self.at_least = path, needed, at_least
        size = f"{'at least ' if at_least else ''}{_bytes(needed)} needed" if needed else "size unknown"
        super().__init__(errno.ENOSPC, f"no space left on device for {path} ({size})")

    def __reduce__(self):
        # OSError pickles as cls(errno, message); a run's DiskFull crosses the pool launcher's process
        # boundary, and unpickling it with those arguments failed and broke the whole pool.
        return type(self), (self.path, self.needed, self.at_least)


def _bytes(n: int) -> str:
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= scale:
            return f"{n / scale:.3g} {unit}"
    return f"{n} bytes"


def _needed(path: Path, content: object, tmp: Path) -> tuple[int | None, bool]:
    """(bytes the write needed, whether that is only a lower bound): exact for text and bytes; for a
    writer (a checkpoint), the largest of its earlier siblings, else at least what it had written
    when the disk filled."""
    if isinstance(content, str):
        return len(content.encode("utf-8")), False
    if isinstance(content, bytes | bytearray):
        return len(content), False
    siblings = [p.stat().st_size for p in path.parent.glob(f"*{path.suffix}") if p.is_file() and p != tmp]
    if siblings:
        return max(siblings), False
    return (tmp.stat().st_size, True) if tmp.exists() else (None, False)


def atomic_write(path: str | Path, content: str | bytes | Callable[[Path], object]) -> Path:
    """Write ``content`` to ``path`` atomically and return ``path``. ``content`` is text (UTF-8), bytes,
    or a writer called with the temporary path (e.g. ``lambda p: torch.save(state, p)``). The parent
    directory must exist."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    try:
        if isinstance(content, str):
            tmp.write_text(content, encoding="utf-8")
        elif isinstance(content, bytes | bytearray):
            tmp.write_bytes(content)
        else:
            content(tmp)
        os.replace(tmp, path)
    except BaseException as e:
        full = isinstance(e, Exception) and not isinstance(e, DiskFull) and _full(e, path)
        needed, at_least = _needed(path, content, tmp) if full else (None, False)
        tmp.unlink(missing_ok=True)
        if full:
            raise DiskFull(path, needed, at_least) from e
        raise
    return path


def _full(e: Exception, path: Path) -> bool:
    """Did ``e`` come from a full disk? An ENOSPC, or a writer that reports its own error (torch.save:
    RuntimeError "file write failed") while the filesystem has under 1 MiB left."""
    if isinstance(e, OSError) and e.errno == errno.ENOSPC:
        return True
    try:
        st = os.statvfs(path.parent)
    except OSError:
        return False
    return isinstance(e, RuntimeError) and st.f_bavail * st.f_frsize < 2**20
