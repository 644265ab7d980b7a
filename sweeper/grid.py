"""Grid expansion: one composed base run × the sweep axes → the planned runs, each a typed, validated
``RunConfig`` with its identity, directory and the Hydra overrides that reproduce it in a job.

Pure: no Hydra composition and no file access happen here (the sweeper composes one base config per
combination of ordinary sweep overrides and calls ``expand`` on each), which is what makes expanding
thousands of runs take a fraction of a second. The overrides a job receives are the combination's
plus ``PlannedRun.settings`` rendered by ``render``; the job recomputes its identity from what Hydra
composed and refuses to run if it differs from ``sweep.run_id`` (so the two can never drift apart).
"""

from __future__ import annotations

import dataclasses
import itertools
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sweeper import budget as budgets
from sweeper.config import BudgetConfig, SweepConfig, branch_changes, precision_changes
from sweeper.identity import dir_name, label, run_id
from train.config import RunConfig


class SweepError(ValueError):
    """Bad sweep input: the message is one line naming the field and the fix."""


@dataclass
class PlannedRun:
    run: RunConfig
    run_id: str
    name: str
    settings: dict[str, Any]
    """Dotted config key → value that turn the combination's config into ``run``."""
    combo: list[str]
    """The ordinary Hydra overrides of the run's combination (e.g. ``experiment=smoke``, ``train.lr=0.1``)."""
    coords: dict[str, Any] = field(default_factory=dict)
    """Table columns: precision, C, d, L, N, D, ratio, steps, seed, params, cost …"""
    phase: int = 1
    parent: PlannedRun | None = None

    @property
    def out_dir(self) -> Path:
        return Path(self.run.out_dir)

    @property
    def overrides(self) -> list[str]:
        return [*self.combo, *render(self.settings)]


@dataclass(frozen=True)
class _Precision:
    label: str
    fields: dict[str, Any]
    config: Any


def tokens_per_step(run: RunConfig) -> int:
    """Tokens (LM: batch × sequence length) or samples (proxy: batch) per optimizer step."""
    from train.tasks import task_spec

    return task_spec(run.task).tokens_per_step(run)


def _precisions(base: RunConfig, sweep: SweepConfig) -> list[_Precision]:
    out = []
    for w, a in itertools.product(sweep.w, sweep.a):
        out.append((f"{w}-{a}", {"w": w, "a": a}, f"sweep.w/sweep.a pair ({w}, {a})"))
    for i, (name, changes) in enumerate(precision_changes("sweep.precisions", sweep.precisions)):
        out.append((name, changes, f"sweep.precisions[{i}]"))
    if not out:
        return [_Precision(_precision_label(base.precision), {}, base.precision)]
    result = []
    for name, changes, where in out:
        try:
            config = base.precision.replace(**changes)
        except ValueError as e:
            raise SweepError(f"{where}: {e}") from None
        result.append(_Precision(name or _precision_label(config), changes, config))
    return result


def _precision_label(p: Any) -> str:
    return p.label()  # records.precision.label: the same string in every reader of the record


def _shapes(base: RunConfig, budget: BudgetConfig) -> list[tuple[dict[str, Any], Any]]:
    shapes = budget.shapes
    if not shapes:
        return [({}, base.model)]
    fields = {f.name for f in dataclasses.fields(base.model)}
    out = []
    for i, shape in enumerate(shapes):
        unknown = sorted(set(shape) - fields)
        where = (
            f"budget.depths[{i}]" if i < len(budget.depths) else f"budget.ladder[{i - len(budget.depths)}]"
        )
        if unknown:
            raise SweepError(
                f"{where} has unknown model field(s) {unknown}; use: {', '.join(sorted(fields))}"
            )
        try:
            out.append((shape, dataclasses.replace(base.model, **shape)))
        except (ValueError, TypeError) as e:
            raise SweepError(f"{where}={shape}: {e}") from None
    return out


def _shape_label(model: Any) -> str:
    return f"d{model.width}L{model.depth}"


def expand(
    base: RunConfig,
    sweep: SweepConfig,
    budget: BudgetConfig,
    sweep_dir: Path,
    combo: Sequence[str] = (),
    swept: dict[str, str] | None = None,
) -> list[PlannedRun]:
    """The first-phase runs of one combination (``swept``: the swept keys and their values here)."""
    swept = swept or {}
    precisions = _precisions(base, sweep)
    shapes = _shapes(base, budget)
    tps = tokens_per_step(base)
    flops = budget.budgets
    if flops:
        try:
            points = budgets.plan(
                flops,
                [m for _, m in shapes],
                tps,
                ratio_min=budget.ratio_min,
                ratio_max=budget.ratio_max,
                warmup_frac=budget.warmup_frac,
                evals=budget.evals,
            )
        except ValueError as e:
            raise SweepError(str(e)) from None
        by_model = {id(m): s for s, m in shapes}
        grid = [(p.C, by_model[id(p.shape)], p.shape, p.steps, p.eval_every) for p in points]
    else:
        grid = [(None, s, m, base.train.steps, base.train.eval_every) for s, m in shapes]
    seeds = [int(s) for s in sweep.seeds] or [None]
    params = [
        f"{k.rsplit('.', 1)[-1]}{label(_value(v))}" for k, v in swept.items() if k not in _IN_SHAPE_LABEL
    ]
    cache: dict = {}

    planned = []
    for prec, (C, shape, model, steps, eval_every), seed in itertools.product(precisions, grid, seeds):
        settings: dict[str, Any] = {f"precision.{k}": v for k, v in prec.fields.items()}
        settings.update({f"model.{k}": v for k, v in shape.items()})
        train = {}
        if C is not None:
            train = {"steps": steps, "warmup_frac": budget.warmup_frac, "eval_every": eval_every}
        if seed is not None:
            train["seed"] = seed
        settings.update({f"train.{k}": v for k, v in train.items()})
        data = base.data
        if seed is not None and base.data is not None:  # the data order has a seed of its own
            data = dataclasses.replace(base.data, seed=seed)
            settings["data.seed"] = seed
        try:
            run = dataclasses.replace(
                base,
                precision=prec.config,
                model=model,
                train=dataclasses.replace(base.train, **train),
                data=data,
            )
        except ValueError as e:
            raise SweepError(f"{' '.join(render(settings))}: {e}") from None
        parts = [prec.label, f"C{label(C)}" if C is not None else "", _shape_label(model), *params]
        parts.append(f"s{run.train.seed}")
        coords = {
            "precision": prec.label,
            "C": C,
            "d": model.width,
            "L": model.depth,
            "N": model.n_params,
            "D": steps * tps,
            "ratio": steps * tps / model.n_params,
            "steps": steps,
            "seed": run.train.seed,
            "params": " ".join(f"{k}={v}" for k, v in swept.items()),
            "cost": 6.0 * model.n_params * steps * tps,
        }
        planned.append(_place(run, parts, settings, list(combo), coords, sweep_dir, cache))
    return planned


def branch(
    parents: Sequence[PlannedRun],
    sweep: SweepConfig,
    sweep_dir: Path,
    step_of: Callable[[PlannedRun], int | None] | None = None,
) -> list[PlannedRun]:
    """The second phase: each parent (of ``sweep.branch_parents``' precisions, where given) branched
    from its checkpoint at ``sweep.branch_step``, or at ``step_of(parent)`` (``sweep.branch_at``: the
    caller reads it from the parent's record; None leaves that parent without branches)."""
    entries = branch_changes("sweep.branches", sweep.branches)
    out, cache = [], {}
    own = {} if sweep.branch_twin else {"twin_every": 0}  # a branch's own bookkeeping settings
    if sweep.branch_ckpt_every is not None:
        own["ckpt_every"] = sweep.branch_ckpt_every
    if sweep.branch_parents:
        parents = [p for p in parents if p.coords.get("precision") in sweep.branch_parents]
    for parent in parents:
        every = parent.run.train.ckpt_every
        k = sweep.branch_step if step_of is None else step_of(parent)
        if k is None:
            continue
        if not every or k % every:
            raise SweepError(
                f"sweep.branch_step={k} needs a parent checkpoint at step {k}, but train.ckpt_every={every}; "
                f"set train.ckpt_every to a divisor of {k}"
            )
        for i, (name, changes, optimizer) in enumerate(entries):
            where = f"sweep.branches[{i}]"
            try:
                precision = parent.run.precision.replace(**changes)
                train = dataclasses.replace(
                    parent.run.train, branch_from=str(parent.out_dir), branch_step=k, **optimizer, **own
                )
                run = dataclasses.replace(parent.run, precision=precision, train=train)
            except ValueError as e:
                raise SweepError(f"{where} (sweep.branch_step={k}): {e}") from None
            settings = {
                **{k_: v for k_, v in parent.settings.items() if k_ not in _PLACEMENT},
                **{f"precision.{f}": v for f, v in changes.items()},
                "train.branch_from": str(parent.out_dir),
                "train.branch_step": k,
                **{f"train.{f}": v for f, v in {**optimizer, **own}.items()},
            }
            blabel = name or _precision_label(precision)
            stem = parent.name[: -len(parent.run_id) - 1]
            steps = parent.run.train.steps
            coords = {
                **parent.coords,
                "precision": f"{parent.coords['precision']}→{blabel}@{k}",
                "cost": parent.coords["cost"] * (steps - k) / steps,  # it starts at step k
            }
            planned = _place(run, [stem, f"{blabel}@{k}"], settings, parent.combo, coords, sweep_dir, cache)
            planned.phase, planned.parent = 2, parent
            out.append(planned)
    return out


_IN_SHAPE_LABEL = ("model.depth", "model.width", "model.d_model")
_PLACEMENT = (  # set per run by _place (a branch sets its own)
    "out_dir",
    "hydra.sweep.subdir",
    "sweep.run_id",
    "logger.wandb.group",
    "logger.label",
    "logger.budget",
)


def _place(run, parts, settings, combo, coords, sweep_dir: Path, cache: dict) -> PlannedRun:
    rid = run_id(run, cache)
    name = dir_name(parts, rid)
    out_dir = str(sweep_dir / name)
    run = dataclasses.replace(run, out_dir=out_dir)
    settings = {**settings, "out_dir": out_dir, "hydra.sweep.subdir": name, "sweep.run_id": rid}
    if coords.get("C") is not None:  # the nominal budget, for wandb (logging only, not identity)
        settings["logger.budget"] = float(coords["C"])
        run = dataclasses.replace(run, logger=dataclasses.replace(run.logger, budget=float(coords["C"])))
    if coords.get("precision") and coords["precision"] != run.precision.label():
        settings["logger.label"] = coords["precision"]  # the sweep's name for it: the run's label
        run = dataclasses.replace(run, logger=dataclasses.replace(run.logger, label=coords["precision"]))
    logger = getattr(run, "logger", None)
    wandb = getattr(logger, "wandb", None)
    if wandb is not None and getattr(wandb, "group", "") is None:
        settings["logger.wandb.group"] = sweep_dir.name
    return PlannedRun(run, rid, name, settings, combo, coords)


def _value(text: str) -> Any:
    try:
        return float(text) if re.fullmatch(r"[-+0-9.eE]+", text) and any(c.isdigit() for c in text) else text
    except ValueError:
        return text


_BARE = re.compile(r"[A-Za-z0-9_./:@+-]+")


def render(settings: dict[str, Any]) -> list[str]:
    """``key=value`` Hydra overrides (strings quoted when needed) of ``settings``."""
    return [f"{k}={_literal(v)}" for k, v in settings.items()]


def _literal(v: Any) -> str:
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int | float):
        return repr(v)
    if isinstance(v, list | tuple):
        return "[" + ",".join(_literal(x) for x in v) + "]"
    s = str(v)
    if _BARE.fullmatch(s) and s.lower() not in ("null", "true", "false") and not _looks_numeric(s):
        return s
    return "'" + s.replace("\\", "\\\\").replace("'", "\\'") + "'"


def _looks_numeric(s: str) -> bool:
    try:
        float(s)
    except ValueError:
        return False
    return True
