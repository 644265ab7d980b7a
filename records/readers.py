"""Tolerant readers of a run's files: a damaged record is skipped with a warning, never a crash.

A sweep's records are written by many processes over days, copied between machines and edited by
people; one bad file must not stop ``--status``, a relaunch or the report. So every reader here
returns what it could read and warns (``RecordWarning``, shown on the console by Python's default
warning filter) naming the file, and the line for metrics, of what it skipped:

* ``read_mapping``: a JSON or YAML file that must hold a mapping (summary.json, config.yaml,
  manifest.json): invalid text, bytes that are not UTF-8 or a non-mapping (``[1, 2, 3]``) → None.
* ``read_summary``: a run's summary.json, None when missing or unreadable. A run whose summary is
  unreadable is unfinished to everyone (the sweeper resumes it, the trainer overwrites it).
* ``read_metrics``: a run's metrics.jsonl line by line: a line that is not JSON, not an object, not
  UTF-8, or whose ``step`` is not a whole number is dropped; a value that is not a number (text in
  ``loss``) becomes None: every metric is a number. The torn last line of a killed writer is dropped
  the same way (and named).
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path
from typing import Any

import yaml

SUMMARY, CONFIG, METRICS, MANIFEST = "summary.json", "config.yaml", "metrics.jsonl", "manifest.json"
PROBE, TENSOR_ERROR = "probe.jsonl", "tensor_error.jsonl"
"""Rows written after training by ``train.probe`` (gradients at checkpoints) and ``train.tensor_error``
(the quantization error of a trained LM's own tensors), read by ``analysis``."""

# libyaml's parser when PyYAML was built with it (the wheels are), else PyYAML's pure-Python one.
_Loader = yaml.CSafeLoader if yaml.__with_libyaml__ else yaml.SafeLoader
_PARSERS = {
    "JSON": (json.loads, (json.JSONDecodeError,)),
    "YAML": (lambda text: yaml.load(text, Loader=_Loader), (yaml.YAMLError,)),
}


class RecordWarning(UserWarning):
    """A run record, or part of one, that could not be read (it is skipped, never fatal)."""


def warn(path: Path, why: str) -> None:
    warnings.warn(f"skipping {path}: {why}", RecordWarning, stacklevel=3)


def read_mapping(path: str | Path, kind: str = "JSON") -> dict[str, Any] | None:
    """The JSON object or YAML mapping (``kind``) in ``path``; None, with a warning, if it is not one
    (None without a warning when the file does not exist)."""
    path = Path(path)
    parse, errors = _PARSERS[kind]
    try:
        obj = parse(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError, *errors) as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else ""
        warn(path, f"unreadable {kind} ({type(e).__name__}: {first[:120]})")
        return None
    if not isinstance(obj, dict):
        warn(path, f"expected a {kind} mapping, got {type(obj).__name__}")
        return None
    return obj


def read_summary(run_dir: str | Path) -> dict[str, Any] | None:
    """``<run_dir>/summary.json`` as a dict; None when missing or unreadable (with a warning)."""
    return read_mapping(Path(run_dir) / SUMMARY, "JSON")


def _number(value: Any) -> bool:
    return value is None or (isinstance(value, int | float) and not isinstance(value, bool))


def read_metrics(path: str | Path) -> list[dict[str, Any]]:
    """The rows of a metrics.jsonl (``path`` the file or its run directory); see the module doc for
    what is dropped. One warning per file lists the first bad lines."""
    path = Path(path)
    if path.is_dir():
        path = path / METRICS
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return []
    except OSError as e:
        warn(path, f"unreadable ({type(e).__name__})")
        return []
    lines = data.split(b"\n")
    rows, bad = [], []
    for i, raw in enumerate(lines, 1):
        if not raw.strip():
            continue
        try:
            row = json.loads(raw.decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError):
            bad.append(f"{i} (not JSON)")
            continue
        step = row.get("step") if isinstance(row, dict) else None
        if not isinstance(row, dict) or not _number(step) or step is None or not float(step).is_integer():
            bad.append(f"{i} (no whole-number step)")
            continue
        for key, value in row.items():
            if key != "step" and not _number(value) and not isinstance(value, bool):
                row[key] = None
                bad.append(f"{i} ({key} is not a number)")
        row["step"] = int(step)
        rows.append(row)
    if bad:
        shown = ", ".join(bad[:5]) + (f" and {len(bad) - 5} more" if len(bad) > 5 else "")
        warnings.warn(f"{path}: dropped or blanked line(s) {shown}", RecordWarning, stacklevel=2)
    return rows
