"""Plain-text tables for the dry run and ``--status`` (no dependency, fixed-width columns)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


def num(x: Any) -> str:
    """Compact numbers: 4.37e17, 19.5M, 301M, 12.3, 1150."""
    if x is None or x == "":
        return "-"
    if isinstance(x, bool) or not isinstance(x, int | float):
        return str(x)
    if isinstance(x, int) or float(x).is_integer() and abs(x) < 1e6:
        x = int(x)
        if abs(x) < 100_000:
            return str(x)
    a = abs(x)
    for unit, scale in (("T", 1e12), ("B", 1e9), ("M", 1e6), ("k", 1e3)):
        if a >= scale and a < 1e15:
            return f"{x / scale:.3g}{unit}"
    if a >= 1e15 or (a and a < 1e-3):
        return f"{x:.3g}".replace("e+", "e")
    return f"{x:.3g}"


def loss(x: Any) -> str:
    """Losses to 4 significant digits: precisions differ by 0.003–0.02, so 3 would hide them."""
    if x is None or isinstance(x, bool) or not isinstance(x, int | float):
        return "-" if x is None else str(x)
    return f"{x:.4g}"


def sci(x: Any) -> str:
    """FLOPs and budgets: 3e8, 4.37e17."""
    if x is None:
        return "-"
    return f"{float(x):.3g}".replace("e+0", "e").replace("e+", "e").replace("e-0", "e-")


def duration(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f}s"
    if seconds < 7200:
        return f"{seconds / 60:.0f}min"
    return f"{seconds / 3600:.1f}h"


def format_table(headers: Sequence[str], rows: Sequence[Sequence[Any]], left: Sequence[str] = ()) -> str:
    """Columns padded to their widest cell; the columns named in ``left`` (text) are left-aligned."""
    cells = [[str(h) for h in headers]] + [[str(c) for c in row] for row in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    lefts = [h in left for h in headers]
    lines = [
        "  ".join(c.ljust(w) if lf else c.rjust(w) for c, w, lf in zip(r, widths, lefts, strict=True))
        for r in cells
    ]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(line.rstrip() for line in lines)
