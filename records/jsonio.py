"""Standard JSON for every record: no ``NaN``, ``Infinity`` or ``-Infinity``.

Python's ``json`` writes non-finite floats as the bare words ``NaN`` and ``Infinity``, which are not
JSON (RFC 8259): ``jq``, browsers, DuckDB and strict parsers reject the whole file, and a diverged run
is exactly the one that produces them. Records store a non-finite number as ``null`` instead; what it
meant is in the record itself (``status: diverged``, ``diverged_step``), and every reader already takes
a missing number as NaN.
"""

from __future__ import annotations

import json
import math
from typing import Any


def finite(obj: Any) -> Any:
    """``obj`` with every non-finite float (at any depth of dicts, lists and tuples) replaced by None."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {k: finite(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [finite(v) for v in obj]
    return obj


def dumps(obj: Any, **kwargs: Any) -> str:
    """``json.dumps`` of ``finite(obj)``, refusing anything non-standard that is left (``allow_nan``
    off); ``default=str`` style keywords pass through."""
    return json.dumps(finite(obj), allow_nan=False, **kwargs)
