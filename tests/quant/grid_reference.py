"""The exact rounding reference of the numerics tests: the nearest point of an enumerated grid."""

from __future__ import annotations

import bisect
import math


def round_on_grid(v, grid: list, mode: str = "even"):
    """Nearest point of ``grid`` (ascending non-negative values; the index is the code, so an even
    index is an even mantissa) to ``v``: ties to the even code, or away from zero for any other
    ``mode``; saturating at ±grid[-1]; the sign kept, -0.0 included. Exact for Fractions, and for
    floats when 2|v| and the sums of neighbours are exact (grid points of <= 8 significant bits)."""
    a = abs(v)
    if a >= grid[-1]:
        r = grid[-1]
    else:
        i = bisect.bisect_right(grid, a) - 1
        lo, hi = grid[i], grid[i + 1]
        if 2 * a < lo + hi:
            r = lo
        elif 2 * a > lo + hi:
            r = hi
        else:
            r = lo if mode == "even" and i % 2 == 0 else hi
    return -r if v < 0 or (v == 0 and math.copysign(1.0, v) < 0) else r
