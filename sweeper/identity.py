"""A run's readable directory name: its coordinates as filesystem-safe tokens, then its identity hash
(``records.identity``, the one definition of what makes two runs the same)."""

from __future__ import annotations

import re
from typing import Any

from records.identity import HASH_CHARS, identity, identity_of, run_id

__all__ = ["dir_name", "identity", "identity_of", "label", "run_id"]

_UNSAFE = re.compile(r"[^A-Za-z0-9._+=@-]+")


def label(value: Any) -> str:
    """A value as a short, filesystem-safe token (``4.37e17``, ``fp8_e4m3``, ``0.003``)."""
    if isinstance(value, float):
        text = f"{value:.3g}".replace("e+", "e").replace("e0", "e").replace("e-0", "e-")
    else:
        text = str(value)
    return _UNSAFE.sub("_", text).strip("_") or "_"


def dir_name(parts: list[str], rid: str, limit: int = 120) -> str:
    """``<part>_<part>_..._<hash>``, the parts cut so the whole stays under ``limit`` characters."""
    stem = "_".join(p for p in parts if p)
    stem = stem[: max(1, limit - HASH_CHARS - 1)].rstrip("_")
    return f"{stem}_{rid}" if stem else rid
