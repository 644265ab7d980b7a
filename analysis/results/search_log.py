"""The search log: every proxy configuration run for the instability mechanism, one row per (sweep,
precision, setting) — the setting, the seeds, what blew up and when, and γ's clip fraction.
"""

from __future__ import annotations

from typing import Any

import pandas as pd

from analysis import proxy
from analysis.report import md_table
from analysis.results.common import Source, _Doc


def _search_rows(sources: list[Source]) -> list[dict[str, Any]]:
    return [row for src in sources for row in src.search_rows]


def search_log(doc: _Doc, sources: list[Source]) -> None:
    doc.add("## Search log: every proxy configuration run for the instability mechanism", "")
    rows = _search_rows([s for s in sources if s.ran])
    if not rows:
        doc.add("No proxy sweep has records yet.", "")
        return
    doc.add(
        "One row per configuration (phase-1 runs only; branches are in 1.3). Onset: first logged step "
        f"whose loss exceeds {proxy.ONSET:g}× the lowest before it (a one-step transient that recovers "
        "counts too, so a run can show an early onset and a late blow-up: the runs' recorded spike steps, "
        "from the trainer's smoothed detector, are in the sections above); late: after half the steps. "
        "γ clamped: "
        "the median, over the logged steps before any onset, of the largest LN-γ clip fraction, as a "
        "median over the seeds (1 = some LayerNorm's γ entirely at 0.875 all along). Earlier "
        "exploration on older code (before the twin was a full citizen) is in "
        "`shared/notes/proxy-search-so-far.md`; its settings are the starting point of these sweeps.",
        "",
        md_table(pd.DataFrame(rows)),
        "",
    )
