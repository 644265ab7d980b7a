"""A run's identity: a short hash of its resolved *training* config (the one definition: the sweeper
names and skips runs by it, a run refuses to resume into a directory holding another identity).

The hash covers every field of the typed ``RunConfig`` (defaults included) except where the run is
written and how it is watched (``out_dir``, ``logger`` (wandb), ``train.device``, ``data.data_dir``)
and fields added later while at their default (``LATE_DEFAULTS``). A branch's ``train.branch_from``
enters as the parent directory's *name* (which ends in the parent's hash), so moving a sweep
directory never changes an identity. Numbers are hashed as floats, so ``lr: 1`` and ``lr: 1.0`` are
the same run.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
from typing import Any

NOT_IDENTITY = ("out_dir", "logger", "train.device", "data.data_dir")
"""Dotted fields that do not change what a run computes."""

LATE_DEFAULTS: dict[str, Any] = {"precision.global_scale": False, "precision.grad_scale_rule": None}
"""Dotted fields added after records existed, and their defaults: hashed only where a run sets
something else, so that every run that does not use one keeps the identity (directory name, skip
rule, resume check) it had before the field existed."""

HASH_CHARS = 8


def identity(run: Any, cache: dict | None = None) -> dict[str, Any]:
    """The run's config as plain data, without the ``NOT_IDENTITY`` fields. ``cache`` (any dict kept
    by the caller) memoizes sub-configs shared between runs, e.g. one precision across a grid."""
    return identity_of(run, cache)


def identity_of(config: Any, cache: dict | None = None) -> dict[str, Any]:
    """``identity`` of a run config given as a dataclass or as plain data (e.g. a run's config.yaml)."""
    d = _plain(config, cache)
    for key in NOT_IDENTITY:
        d = _without(d, key.split("."))
    for key, default in LATE_DEFAULTS.items():
        if _get(d, key.split("."), default) == default:
            d = _without(d, key.split("."))
    train = d.get("train")
    if isinstance(train, dict) and train.get("branch_from"):
        d["train"] = {**train, "branch_from": os.path.basename(os.path.normpath(train["branch_from"]))}
    return d


def run_id(run: Any, cache: dict | None = None) -> str:
    """Short stable hash of ``identity(run)`` (``run`` a ``RunConfig`` or its plain-data form)."""
    text = json.dumps(identity(run, cache), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:HASH_CHARS]


def _get(d: Any, path: list[str], missing: Any) -> Any:
    """The value at the nested key ``path`` of ``d``, or ``missing`` where there is none."""
    for key in path:
        if not isinstance(d, dict) or key not in d:
            return missing
        d = d[key]
    return d


def _without(d: Any, path: list[str]) -> Any:
    """``d`` without the nested key ``path`` (copies along the path; shared sub-dicts stay intact)."""
    head, *rest = path
    if not isinstance(d, dict) or head not in d:
        return d
    d = dict(d)
    if rest:
        d[head] = _without(d[head], rest)
    else:
        del d[head]
    return d


def _plain(x: Any, cache: dict | None = None) -> Any:
    if isinstance(x, bool) or x is None or isinstance(x, str):
        return x
    if isinstance(x, int | float):
        return float(x)
    if isinstance(x, dict):
        return {str(k): _plain(v, cache) for k, v in x.items()}
    if isinstance(x, list | tuple):
        return [_plain(v, cache) for v in x]
    if dataclasses.is_dataclass(x) and not isinstance(x, type):  # no asdict: its deep copies are slow
        if cache is not None and id(x) in cache:
            return cache[id(x)][1]
        out = {f.name: _plain(getattr(x, f.name), cache) for f in dataclasses.fields(x)}
        if cache is not None:
            cache[id(x)] = (x, out)  # x kept alive, so its id is not reused
        return out
    return str(x)
