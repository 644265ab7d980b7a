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

import os
from collections.abc import Callable
from pathlib import Path


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
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return path
