"""Run records → tables, fits, block-size theory, figures and the report.

    from analysis import collect, fit_chinchilla
    df = collect("runs/my_sweep")              # one row per run
    fit = fit_chinchilla(df[df.precision == "bf16"])

Submodules: ``collect`` (records → frames), ``fits`` (Chinchilla fits), ``isoflop`` (minima, frontier,
multipliers), ``instability`` (divergence/spike maps, clip fractions), ``plots`` (figures),
``report`` (``python -m analysis report <sweep_dir>``) and ``blocksize`` (the block-size study,
imported only on use: ``import analysis.blocksize``).
"""

from __future__ import annotations

import importlib
from typing import Any

from analysis.collect import collect, curves, export, find_records, study_records
from analysis.fits import (
    ChinchillaFit,
    InsufficientData,
    fit_chinchilla,
    fit_chinchilla_study,
    fit_per_precision,
)
from analysis.instability import clip_summary, instability_map
from analysis.isoflop import Frontier, compute_multipliers, fit_frontiers, isoflop_minima, reference_precision
from records import RecordWarning

_LAZY = {"write_report": ("analysis.report", "write_report")}
_SUBMODULES = ("blocksize", "plots", "report")

__all__ = [
    "ChinchillaFit",
    "Frontier",
    "InsufficientData",
    "RecordWarning",
    "clip_summary",
    "collect",
    "compute_multipliers",
    "curves",
    "export",
    "find_records",
    "fit_chinchilla",
    "fit_chinchilla_study",
    "fit_frontiers",
    "fit_per_precision",
    "instability_map",
    "isoflop_minima",
    "reference_precision",
    "study_records",
    "write_report",
]


def __getattr__(name: str) -> Any:
    """Heavy or optional parts on first use: ``write_report``, ``analysis.plots``, ``analysis.blocksize``."""
    if name in _LAZY:
        module, attr = _LAZY[name]
        return getattr(importlib.import_module(module), attr)
    if name in _SUBMODULES:
        return importlib.import_module(f"analysis.{name}")
    raise AttributeError(f"module 'analysis' has no attribute {name!r}")
