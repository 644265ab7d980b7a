"""Run records → tidy pandas frames: ``collect`` (one row per run) and ``curves`` (one row per logged step).

A run record is a directory holding ``summary.json`` and/or ``config.yaml`` (``records.run``), at any
depth under the sweep directory. Hidden directories (Hydra's ``.hydra/``) and ``ckpt/`` are never
searched. A record whose summary names a ``kind`` (e.g. ``"block_size_study"``) is not a training
run: ``collect`` leaves it out and ``study_records`` returns it.

Columns of ``collect``:

- ``run`` (path relative to the sweep directory, the row's id) and ``path``;
- the resolved config flattened with dotted names (``model.depth``, ``train.lr``, ``precision.w``,
  ``data.source`` …; lists and dicts as JSON text);
- precision as it ran: ``w``, ``a``, the four backward roles ``w_bwd``, ``a_bwd``, ``g_dgrad``,
  ``g_wgrad`` with their defaults resolved (``fp32`` when forward-only), ``fwd_only``,
  ``norm_affine``, ``block_size``, ``scale``; ``pair`` = ``"w/a"`` (for W × A maps) and
  ``precision``, the run's one label (``records.precision.label``: the sweep's name for it, else
  built from the settings, e.g. ``"mxfp8_e4m3w-bf16a"``, ``"mxfp8_e4m3-fwd-bs16"``);
- ``N``, ``D``, ``C`` (as run: a diverged run stops early), ``D_planned``, ``C_planned`` (at
  ``steps``), ``tokens_per_param`` = D_planned/N, ``budget`` (nominal compute: the sweeper's ``C`` from
  its ``manifest.json``, else ``C_planned`` grouped within 10 %);
- ``sweep.<key>``: the run's coordinates in a sweeper ``manifest.json`` found under the sweep directory
  (``sweep.C``, ``sweep.precision``, ``sweep.seed``, ``sweep.params`` …);
- ``status`` (``done | diverged | failed | interrupted``, or ``incomplete`` without a summary),
  ``diverged``, ``spike_step``, ``spiked``, ``recovered``, ``unstable`` (diverged, or spiked and not
  recovered), ``final_val_loss``, ``min_val_loss``, ``final_train_loss``, ``median_step_time``,
  ``wall_time`` and the remaining scalar summary fields.

A corrupt record (unparsable JSON/YAML, a summary that is not an object) is skipped with a
``RecordWarning`` naming the file; a torn line in ``metrics.jsonl`` is dropped the same way.

``config.yaml`` is read with PyYAML's libyaml-backed ``CSafeLoader`` (``SafeLoader``, about 6× slower,
where PyYAML was built without libyaml): 2,000 records collect in about 1.1 s on a 2-core box.
"""

from __future__ import annotations

import json
import math
import os
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from records import CONFIG, MANIFEST, METRICS, SUMMARY, RecordWarning, precision, read_mapping, read_metrics

_SKIP_DIRS = {"ckpt", "__pycache__", "figures"}

BUDGET_KEYS = ("sweep.C", "budget", "budget.flops", "sweep.budget", "train.budget", "flops_budget")
_SUMMARY_SKIP = {"precision", "policy_final", "versions", "git"}


_TRAIN_KINDS = (None, "train", "run")  # a record's ``kind`` for a training run (None: older records)


def find_records(sweep_dir: str | Path) -> list[Path]:
    """Every directory under ``sweep_dir`` (itself included) holding a summary.json or config.yaml."""
    return _walk(sweep_dir)[0]


def _walk(sweep_dir: str | Path) -> tuple[list[Path], list[Path]]:
    """(record directories, sweeper manifests) under ``sweep_dir``."""
    root = Path(sweep_dir)
    if not root.is_dir():
        raise FileNotFoundError(f"sweep directory {root} does not exist")
    found, manifests = [], []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if not d.startswith(".") and d not in _SKIP_DIRS)
        if SUMMARY in filenames or CONFIG in filenames:
            found.append(Path(dirpath))
        if MANIFEST in filenames:
            manifests.append(Path(dirpath) / MANIFEST)
    return found, manifests


def manifest_coords(manifests: list[Path]) -> dict[str, dict[str, Any]]:
    """Run directory (absolute path) → the sweeper's coordinates of that run (``manifest.json``
    ``runs[].coords``, and ``earlier[].coords`` for runs of earlier launches into the same sweep:
    nominal budget ``C``, precision label, seed, swept params …)."""
    out: dict[str, dict[str, Any]] = {}
    for path in manifests:
        manifest = read_mapping(path, "JSON")
        if not manifest:
            continue
        lists = [manifest.get(key) for key in ("earlier", "runs")]
        runs = [r for rs in lists if isinstance(rs, list) for r in rs]
        for r in runs:  # this launch's runs last: they win over an earlier launch's
            if isinstance(r, dict) and isinstance(r.get("name"), str) and isinstance(r.get("coords"), dict):
                out[os.path.abspath(path.parent / r["name"])] = r["coords"]
    return out


def _flatten(d: dict[str, Any], prefix: str = "") -> Iterator[tuple[str, Any]]:
    for k, v in d.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict) and v:
            yield from _flatten(v, key + ".")
        elif isinstance(v, list | dict):
            yield key, json.dumps(v)
        else:
            yield key, v


def precision_fields(prec: dict[str, Any] | None, label: str | None = None) -> dict[str, Any]:
    """Columns describing what ran: the forward and (resolved) backward formats, the flags, the
    ``pair`` (``<w>/<a>``, for W × A maps) and ``precision``, the run's one label
    (``records.precision.label``: ``label``, the sweep's name recorded as ``logger.label``, else
    built from the settings)."""
    p = precision.resolve(prec)
    out: dict[str, Any] = {role: p[role] for role in ("w", "a", *precision.BACKWARD_ROLES)}
    out.update(
        fwd_only=not p["quantize_backward"],
        norm_affine=p["norm_affine"],
        block_size=p["block_size"],
        scale=p["scale"],
        pair=precision.pair(p),
        precision=precision.label(prec, label),
    )
    return out


def _row(run_dir: Path, root: Path, coords: dict[str, dict[str, Any]]) -> dict[str, Any] | None:
    summary = config = None
    if (run_dir / SUMMARY).exists():
        summary = read_mapping(run_dir / SUMMARY, "JSON")
        if summary is None:
            return None
        if summary.get("kind") not in _TRAIN_KINDS:
            return None  # a study record (see study_records), not a training run
    if (run_dir / CONFIG).exists():
        config = read_mapping(run_dir / CONFIG, "YAML")
        if config is None:
            return None
    if summary is None and config is None:
        return None
    if config is not None and config.get("kind") not in _TRAIN_KINDS:
        return None
    rel = run_dir.relative_to(root).as_posix()
    row: dict[str, Any] = {"run": rel if rel != "." else run_dir.name, "path": str(run_dir)}
    if config:
        row.update(_flatten(config))
    for k, v in coords.get(os.path.abspath(run_dir), {}).items():
        row[f"sweep.{k}"] = json.dumps(v) if isinstance(v, list | dict) else v
    prec = (summary or {}).get("precision") or (config or {}).get("precision")
    logger = (config or {}).get("logger")
    name = logger.get("label") if isinstance(logger, dict) else None
    name = name if isinstance(name, str) else None
    row.update(precision_fields(prec if isinstance(prec, dict) else None, name))
    if summary is None:
        row["status"] = "incomplete"
        return row
    for k, v in summary.items():
        if k in _SUMMARY_SKIP:
            continue
        if isinstance(v, dict):
            row.update(_flatten(v, k + "."))
        elif isinstance(v, list):
            row[k] = json.dumps(v)
        else:
            row[k] = v
    for k in ("git", "versions"):
        if isinstance(summary.get(k), dict):
            row.update(_flatten(summary[k], k + "."))
    final = summary.get("policy_final")
    if isinstance(final, dict):
        row["precision_final"] = precision_fields(final)["precision"]
    return row


_FLOAT_COLUMNS = (
    "N",
    "D",
    "C",
    "final_val_loss",
    "min_val_loss",
    "final_train_loss",
    "spike_step",
    "diverged_step",
    "median_step_time",
    "wall_time",
    "wall_time_total",
    "step",
    "steps",
)


def collect(sweep_dir: str | Path) -> pd.DataFrame:
    """One row per training run under ``sweep_dir`` (see the module docstring for the columns)."""
    root = Path(sweep_dir)
    records, manifests = _walk(root)
    coords = manifest_coords(manifests)
    rows = [r for d in records if (r := _row(d, root, coords)) is not None]
    df = pd.DataFrame(rows)
    if df.empty:
        return pd.DataFrame(columns=["run", "path", "status", "precision", "pair", "N", "D", "C"])
    for col in _FLOAT_COLUMNS:  # C overflows int64 at real budgets; None → NaN
        df[col] = pd.to_numeric(df[col], errors="coerce").astype(float) if col in df else np.nan
    for col in ("status", "recovered"):
        if col not in df:
            df[col] = None
    frac = df["steps"] / df["step"].where(df["step"] > 0)
    df["D_planned"] = np.where(df["step"] == df["steps"], df["D"], df["D"] * frac)
    df["C_planned"] = np.where(df["step"] == df["steps"], df["C"], df["C"] * frac)
    df["tokens_per_param"] = df["D_planned"] / df["N"]
    df["diverged"] = df["status"].eq("diverged")
    df["spiked"] = df["spike_step"].notna()
    df["recovered"] = df["recovered"].astype("boolean")
    df["unstable"] = df["diverged"] | (df["spiked"] & df["recovered"].eq(False).fillna(False))
    df["unstable"] = df["unstable"].astype(bool)
    df["budget"] = _budget(df)
    return df.sort_values("run", kind="stable").reset_index(drop=True)


def _budget(df: pd.DataFrame) -> pd.Series:
    for key in BUDGET_KEYS:
        if key in df and pd.to_numeric(df[key], errors="coerce").notna().any():
            explicit = pd.to_numeric(df[key], errors="coerce").astype(float)
            return explicit.fillna(group_budgets(df["C_planned"]))
    return group_budgets(df["C_planned"])


def group_budgets(C: pd.Series | np.ndarray, rel_tol: float = 0.1) -> pd.Series:
    """Nominal budgets: sorted compute values split wherever consecutive ones differ by more than
    ``rel_tol``; each group is labelled by its largest value rounded to 3 significant figures (steps
    are rounded down from the budget, so runs spend at most their nominal budget)."""
    c = pd.Series(np.asarray(C, dtype=float))
    out = pd.Series(np.nan, index=c.index)
    ok = c[(c > 0) & np.isfinite(c)].sort_values()
    if ok.empty:
        return out
    group = (np.log(ok).diff() > math.log1p(rel_tol)).cumsum()
    for _, members in ok.groupby(group.to_numpy()):
        out[members.index] = float(f"{members.max():.3g}")
    return out


def study_records(sweep_dir: str | Path, kind: str) -> list[tuple[Path, dict[str, Any]]]:
    """(directory, summary) of every record whose summary.json says ``"kind": kind``."""
    out = []
    for d in find_records(sweep_dir):
        if (d / SUMMARY).exists():
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", RecordWarning)  # collect warns about these already
                summary = read_mapping(d / SUMMARY, "JSON")
            if summary is not None and summary.get("kind") == kind:
                out.append((d, summary))
    return out


RUN_COORDS = ("precision", "pair", "fwd_only", "N", "tokens_per_param", "budget", "status", "unstable")


def run_rows(runs: pd.DataFrame, name: str) -> list[dict[str, Any]]:
    """The rows of the step-keyed JSONL file ``name`` (metrics.jsonl, probe.jsonl, tensor_error.jsonl)
    in each run's directory (``runs``' ``path``), each with its run's ``run``; runs without it add none."""
    rows: list[dict[str, Any]] = []
    for run, run_dir in zip(runs["run"], runs["path"], strict=True):
        path = Path(run_dir) / name
        if path.exists():
            rows.extend({"run": run, **row} for row in read_metrics(path))
    return rows


def curves(sweep_dir: str | Path, runs: pd.DataFrame | None = None) -> pd.DataFrame:
    """One row per (run, logged step) from every metrics.jsonl, with the run's coordinates
    (``RUN_COORDS`` from ``collect``, or from ``runs`` if given) as extra columns."""
    runs = collect(sweep_dir) if runs is None else runs
    rows = run_rows(runs, METRICS)
    if not rows:
        return pd.DataFrame(columns=["run", "step", *RUN_COORDS])
    long = pd.DataFrame(rows)
    coords = [c for c in RUN_COORDS if c in runs]
    return long.merge(runs[["run", *coords]], on="run", how="left")


def export(df: pd.DataFrame, stem: str | Path) -> tuple[Path, Path]:
    """Write ``<stem>.parquet`` and ``<stem>.csv``; returns both paths."""
    stem = Path(stem)
    stem.parent.mkdir(parents=True, exist_ok=True)
    pq, csv = stem.with_suffix(".parquet"), stem.with_suffix(".csv")
    parquet_safe(df).to_parquet(pq, index=False)
    df.to_csv(csv, index=False)
    return pq, csv


def parquet_safe(df: pd.DataFrame) -> pd.DataFrame:
    """Object columns with mixed types (e.g. a config field that is a number in one run and text in
    another) become text, which parquet accepts."""
    out = df.copy()
    for col in [c for c in out.columns if pd.api.types.is_object_dtype(out[c].dtype)]:
        kinds = {type(v) for v in out[col] if v is not None and not (isinstance(v, float) and math.isnan(v))}
        if len(kinds) > 1:
            out[col] = out[col].map(lambda v: None if v is None or v != v else str(v))
    return out
