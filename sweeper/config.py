"""Sweep schemas: ``BudgetConfig`` (conf/budget/), ``SweepConfig`` (the ``sweep`` section) and
``LaunchConfig``, the root of ``conf/``: one run's ``RunConfig`` plus these two sweep-only sections.

Only the ``RunConfig`` part of the root is a run: ``to_run_config`` drops ``budget``, ``sweep`` (and
``study``) before building it, so they never reach a run record or a run's identity. The sweep axes:

* precision: ``sweep.w × sweep.a`` (every pair) followed by the named precisions in
  ``sweep.precisions`` (each a partial ``precision`` section, optionally starting from a
  ``conf/precision/`` option named by ``precision``, plus an optional ``name``); neither: the base
  precision;
* budget × shape: ``budget.flops`` × the ladder (``budget.depths``, ``budget.ladder``) through
  ``sweeper.budget.plan``; a ladder without budgets sweeps shapes at the base ``train.steps``;
* seeds: ``sweep.seeds`` (``train.seed``, and ``data.seed`` for the LM);
* anything else: ordinary Hydra sweep overrides (``train.lr=1e-3,3e-3`` or ``hydra.sweeper.params``);
* branches (second phase): every first-phase run is branched from its checkpoint at
  ``sweep.branch_step`` (or at each fraction in ``sweep.branch_at`` of its first-spike step, read
  from its record)
  once per entry of ``sweep.branches`` (precision changes plus a ``name``; an entry's ``train`` map
  changes the optimizer's hyperparameters from the branch point on, ``BRANCH_TRAIN_FIELDS``).
"""

from __future__ import annotations

import dataclasses
import functools
import os
import time
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from train.config import PrecisionConfig, RunConfig
from train.distributed import is_main

RERUN = ("none", "failed", "all")
SWEEP_ONLY = ("budget", "sweep", "study")
"""Root keys that are not part of a run."""


@dataclass
class BudgetConfig:
    """Compute budgets and the model ladder they are spread over (``sweeper.budget``)."""

    flops: list[float] = field(default_factory=list)
    """Compute budgets C in FLOPs (C = 6·N·D). Empty (and no ``geomspace``): no budget axis."""
    geomspace: list[float] = field(default_factory=list)
    """``[start, stop, num]``: ``numpy.geomspace`` budgets, listed before ``flops``."""
    depths: list[int] = field(default_factory=list)
    """Ladder shorthand: one shape ``{depth: L}`` per entry (the LM's width is then 64·L)."""
    ladder: list[dict[str, Any]] = field(default_factory=list)
    """Ladder shapes as ``model`` fields, e.g. ``{depth: 2, d_model: 96, n_heads: 2}``; after ``depths``."""
    ratio_min: float = 2.0
    """Keep (C, shape) pairs with ratio_min < D/N < ratio_max (tokens per parameter)."""
    ratio_max: float = 200.0
    warmup_frac: float = 0.2
    """Warm-up fraction of each budget run (sets ``train.warmup_frac``)."""
    evals: int = 10
    """Evaluations per budget run: ``train.eval_every = steps // evals``."""

    @property
    def budgets(self) -> list[float]:
        if self.geomspace and len(self.geomspace) != 3:
            raise ValueError(f"budget.geomspace={list(self.geomspace)} must be [start, stop, num]")
        from sweeper.budget import geomspace

        head = geomspace(*self.geomspace) if self.geomspace else []
        return head + [float(c) for c in self.flops]

    @property
    def shapes(self) -> list[dict[str, Any]]:
        return [{"depth": int(d)} for d in self.depths] + [dict(s) for s in self.ladder]


@dataclass
class SweepConfig:
    """What ``python launch.py -m ...`` expands, and how (the ``mxsweep`` Hydra sweeper)."""

    name: str | None = None
    """The sweep's directory under ``outputs/sweeps/`` (``hydra.sweep.dir``); experiments set it, and
    relaunching a named sweep resumes it. Unset (an ad-hoc ``-m key=a,b``): a new directory per launch,
    ``multirun-<launch time>``, so two ad-hoc sweeps never share a manifest (name one to resume it)."""
    dry_run: bool = False
    """Print the table of runs and the count; submit nothing, write nothing."""
    rerun: str = "none"
    """Runs whose record says done or diverged are skipped, and so are failed ones unless ``failed``;
    ``all`` clears and reruns everything."""
    w: list[str] = field(default_factory=list)
    """Weight formats; with ``a``: every (w, a) pair."""
    a: list[str] = field(default_factory=list)
    precisions: list[dict[str, Any]] = field(default_factory=list)
    """Named recipes, each ``{name: ..., <precision fields>}`` on top of the base precision."""
    seeds: list[int] = field(default_factory=list)
    """Seeds (train.seed, and data.seed for the LM); empty: the base seed only."""
    branch_step: int | None = None
    """Second phase: branch every first-phase run from its checkpoint at this step ..."""
    branches: list[dict[str, Any]] = field(default_factory=list)
    """... once per entry, ``{name: ..., <precision fields to change>}`` (and an optional ``train``
    map of optimizer settings, ``BRANCH_TRAIN_FIELDS``)."""
    branch_at: list[float] = field(default_factory=list)
    """Instead of a fixed ``branch_step``: branch each parent at these fractions of the step of its
    first spike (``spike_step``, else its ``diverged_step``), each rounded down to one of its
    checkpoints (``train.ckpt_every``): ``[0.4, 0.75]`` asks how early an intervention must come.
    Read from the parents' records once they have finished, so the branches are planned after the
    first phase; a parent that never spiked is not branched."""
    branch_parents: list[str] = field(default_factory=list)
    """Branch only the first-phase runs of these ``sweep.precisions`` names (e.g. ``[mx_ln_e4m3]``: the
    interventions act on γ in E4M3, so a γ-unquantized parent's branches would answer nothing);
    empty: every first-phase run."""
    branch_twin: bool = True
    """Branches keep the fp32 twin. Off, they train without it: up to the branch step a branch's twin
    would be its parent's, and after it the same fp32 trajectory again (same init, batches and LR),
    so the parent's twin is already every branch's fp32 reference, at half the cost."""
    branch_ckpt_every: int | None = None
    """Branches checkpoint every this many steps (0: only at the end and on a signal); None: their
    parent's ``train.ckpt_every``. A branch's checkpoints serve only to resume it or branch from it
    again, and at the parents' fine cadence a few hundred branches wrote tens of GB (a disk filled)."""
    throughput: float = 2.0e9
    """FLOP/s (6·N·D per second) assumed by the dry run's time estimate (per run, one job)."""
    progress: bool = True
    """A progress bar while the launched runs are running (local launchers)."""
    resources: list[dict[str, Any]] = field(default_factory=list)
    """Launcher parameters by run size, ``[{max_params: N or null, launcher: {timeout_min: 10, ...}}, ...]``:
    each run takes the first rule with ``max_params`` ≥ its N (null: any size) and the sweeper launches
    each rule's runs as a separate launcher call with these ``hydra.launcher`` keys changed. Empty: one
    call with ``hydra.launcher`` as it is. Launchers without such parameters (basic) ignore it."""
    run_id: str | None = None
    """Set by the sweeper on every job it launches; the job checks its own config hashes to it."""


@dataclass
class LaunchConfig(RunConfig):
    """The root config of ``conf/``: a ``RunConfig`` and the sweep-only sections."""

    budget: BudgetConfig = field(default_factory=BudgetConfig)
    sweep: SweepConfig = field(default_factory=SweepConfig)
    study: Any = None
    """A study that is not a training run: ``name`` (one of ``launch.STUDIES``) and its arguments
    (``experiment=block_size_study``)."""
    overwrite: bool = False
    """A single run only: replace whatever ``out_dir`` holds (a finished run, or a run of another
    config) instead of refusing. Not part of the run's identity."""

    def __post_init__(self):  # a schema only: runs are built by to_run_config
        pass


def sweep_only_keys(cfg: DictConfig) -> list[str]:
    """The ``sweep.*`` and ``budget.*`` settings of ``cfg`` that differ from their defaults. They mean
    something only to a sweep (``-m``): a single run must refuse them, not silently ignore them."""
    out = []
    for key, schema in (("sweep", SweepConfig), ("budget", BudgetConfig)):
        node = cfg.get(key)
        if node is None:
            continue
        have = OmegaConf.to_container(node, resolve=True) if OmegaConf.is_config(node) else node
        default = dataclasses.asdict(schema())
        for name, value in (have or {}).items():
            if name in ("run_id",):  # set per job by the sweeper
                continue
            if name in default and value != default[name]:
                out.append(f"{key}.{name}")
    return out


def to_run_config(cfg: DictConfig) -> RunConfig:
    """The typed, validated run of a composed config; ``ValueError`` (one line) on bad input. The
    model and data sections are built with the schemas the run's task registers (``train.tasks``)."""
    from train.config import build_section
    from train.tasks import task_spec

    known = {f.name for f in dataclasses.fields(LaunchConfig)} | {"hydra"}
    unknown = sorted(str(k) for k in cfg if k not in known)
    if unknown:  # +nonsense_key=1 or +trian.steps=5: Hydra adds them, nothing would read them
        raise ValueError(
            f"{unknown[0]} is not a config key (top level: {', '.join(sorted(known - {'hydra'}))}); "
            "check the spelling (`python launch.py --cfg job`)"
        )
    try:
        names = [f.name for f in dataclasses.fields(RunConfig) if f.name in cfg]
        plain = {k: _plain(cfg, k) for k in names}
        task = str(plain.get("task", RunConfig.task))
        spec = task_spec(task)
        typed = OmegaConf.get_type(cfg, "model") if "model" in cfg else None
        if typed is not None and typed not in (spec.model, dict) and isinstance(typed, type):
            raise ValueError(
                f"model is a {typed.__name__} option but task={task} needs a {spec.model.__name__}: "
                f"choose a model option of that task (python launch.py --help lists them) or another task"
            )
        plain["model"] = build_section("model", spec.model, plain.get("model") or {})
        data = plain.get("data")
        plain["data"] = build_section("data", spec.data, data or {}) if spec.data is not None else None
        return OmegaConf.to_object(OmegaConf.merge(OmegaConf.structured(RunConfig), plain))
    except TypeError as e:  # e.g. an unknown key added with +model.foo=1
        raise ValueError(str(e).split("\n")[0]) from None
    except Exception as e:  # OmegaConf validation errors carry the full key path in their first line
        if isinstance(e, ValueError) and "\n" not in str(e):
            raise
        raise ValueError(str(e).strip().split("\n")[0]) from None


def _plain(cfg: DictConfig, key: str) -> Any:
    node = cfg._get_node(key)
    if OmegaConf.is_config(node):
        return OmegaConf.to_container(node, resolve=True, throw_on_missing=True)
    return getattr(cfg, key)


def sweep_settings(cfg: DictConfig) -> tuple[SweepConfig, BudgetConfig]:
    """The typed ``sweep`` and ``budget`` sections of a composed config (validated)."""
    sweep: SweepConfig = OmegaConf.to_object(cfg.sweep)
    budget: BudgetConfig = OmegaConf.to_object(cfg.budget)
    if sweep.rerun not in RERUN:
        raise ValueError(f"sweep.rerun={sweep.rerun!r} is unknown; use one of: {', '.join(RERUN)}")
    if bool(sweep.w) != bool(sweep.a):
        raise ValueError("sweep.w and sweep.a go together (every w × a pair); set both or neither")
    if not sweep.throughput > 0:
        raise ValueError(f"sweep.throughput={sweep.throughput} must be > 0 (FLOP/s)")
    if sweep.branches and (sweep.branch_step is None) == (not sweep.branch_at):
        raise ValueError(
            "sweep.branches needs one of sweep.branch_step (a fixed parent checkpoint step) or "
            "sweep.branch_at (fractions of each parent's first-spike step, e.g. [0.4,0.75])"
        )
    if sweep.branch_ckpt_every is not None and sweep.branch_ckpt_every < 0:
        raise ValueError(
            f"sweep.branch_ckpt_every={sweep.branch_ckpt_every} must be >= 0 (0: only at the end) or null "
            "(the parent's train.ckpt_every)"
        )
    bad = [f for f in sweep.branch_at if not 0 < f < 1]
    if bad:
        raise ValueError(
            f"sweep.branch_at={list(sweep.branch_at)}: {bad[0]} is not in (0, 1); each is a fraction of "
            "the spike step"
        )
    resource_rules(sweep.resources)
    # Named options are resolved once, here (through Hydra's config search path): the grid sees fields.
    sweep.precisions = _resolved("sweep.precisions", sweep.precisions)
    sweep.branches = [
        {**({"name": n} if n is not None else {}), **f, **({"train": t} if t else {})}
        for n, f, t in branch_changes("sweep.branches", sweep.branches)
    ]
    names = [str(p.get("name")) for p in sweep.precisions]
    unknown = [n for n in sweep.branch_parents if n not in names]
    if unknown:
        raise ValueError(
            f"sweep.branch_parents={list(sweep.branch_parents)}: {unknown[0]!r} is not a name in "
            f"sweep.precisions ({', '.join(names) or 'none'}); name parents by their sweep.precisions name"
        )
    from sweeper.budget import check_window

    check_window(budget.ratio_min, budget.ratio_max)
    budget.budgets  # noqa: B018 -- validates geomspace
    return sweep, budget


PRECISION_FIELDS = tuple(f.name for f in dataclasses.fields(PrecisionConfig))


@functools.cache
def precision_option(name: str) -> dict[str, Any]:
    """The fields a ``conf/precision/`` option sets (those that differ from the schema's defaults),
    composed through Hydra's own config search path (so an option's ``defaults`` alias and a plugin's
    config directories work); ``ValueError`` naming the options when ``name`` is not one."""
    from hydra import compose
    from hydra.core.global_hydra import GlobalHydra
    from hydra.errors import HydraException

    from records.precision import DEFAULTS

    if not GlobalHydra.instance().is_initialized():
        raise ValueError(f"precision option {name!r} needs Hydra's config (use it through launch.py)")
    try:
        cfg = compose(config_name="config", overrides=[f"precision={name}", "logger=disabled"])
    except HydraException as e:
        raise ValueError(str(e).strip().splitlines()[0]) from None
    fields = OmegaConf.to_container(cfg.precision, resolve=True)
    return {
        k: v for k, v in fields.items() if v != DEFAULTS.get(k) and not (v == [] and DEFAULTS.get(k) == ())
    }


def _resolved(key: str, entries: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``entries`` with every ``precision: <option>`` replaced by the option's fields (validated)."""
    return [{**({"name": n} if n is not None else {}), **f} for n, f in precision_changes(key, entries)]


def precision_changes(key: str, entries: list[dict[str, Any]]) -> list[tuple[str | None, dict[str, Any]]]:
    """``(name, {precision field: value})`` per entry; unknown fields fail with the field list. An
    entry's ``precision: <option>`` starts from that ``conf/precision/`` option's fields (its own
    fields win), so presets name the options instead of repeating them:
    ``{name: e4m3w-bf16a, precision: e4m3w_bf16a}``."""
    out = []
    for i, entry in enumerate(entries):
        entry = dict(entry)
        name = entry.pop("name", None)
        option = entry.pop("precision", None)
        if option is not None:
            try:
                entry = {**precision_option(str(option)), **entry}
            except ValueError as e:
                raise ValueError(f"{key}[{i}].precision={option}: {e}") from None
        unknown = sorted(set(entry) - set(PRECISION_FIELDS))
        if unknown:
            valid = ", ".join(PRECISION_FIELDS)
            raise ValueError(
                f"{key}[{i}] has unknown field(s) {unknown}; precision fields are: {valid} (and `precision`, "
                "an option of conf/precision/)"
            )
        out.append((None if name is None else str(name), entry))
    return out


BRANCH_TRAIN_FIELDS = ("lr", "betas", "eps", "weight_decay", "grad_clip")
"""The ``train`` fields a branch may change: the optimizer's hyperparameters. The weights and Adam's
moments carry over from the parent's checkpoint (``train.checkpoint.restore`` keeps the branch's own
hyperparameters), so such a branch asks what changing the optimizer from that point on does, e.g.
``{name: adam_b2_95, train: {betas: [0.9, 0.95]}}``. Fields that change the optimizer's layout
(``norm_lr_mult``) or the run's length and data cannot be changed mid-run."""


def branch_changes(
    key: str, entries: list[dict[str, Any]]
) -> list[tuple[str | None, dict[str, Any], dict[str, Any]]]:
    """``(name, {precision field: value}, {train field: value})`` per ``sweep.branches`` entry: its
    precision part as ``precision_changes`` reads it, its ``train`` map checked against
    ``BRANCH_TRAIN_FIELDS`` and validated by ``TrainConfig`` now (before any run starts, although
    branches are planned only once their parents finish). An entry that changes ``train`` needs a
    ``name``: a precision label cannot say what it changed."""
    from train.config import TrainConfig

    rest, trains = [], []
    for i, entry in enumerate(entries):
        entry = dict(entry)
        train = entry.pop("train", None) or {}
        where = f"{key}[{i}].train"
        if not isinstance(train, dict):
            raise ValueError(f"{where}={train!r} must be a map of train fields, e.g. {{betas: [0.9, 0.95]}}")
        unknown = sorted(set(train) - set(BRANCH_TRAIN_FIELDS))
        if unknown:
            fields = ", ".join(BRANCH_TRAIN_FIELDS)
            raise ValueError(f"{where} has unknown field(s) {unknown}; a branch may change: {fields}")
        if train and entry.get("name") is None:
            raise ValueError(
                f"{key}[{i}] changes train ({', '.join(train)}): give it a name, its runs' label"
            )
        try:
            TrainConfig(**train)
        except ValueError as e:
            raise ValueError(f"{where}: {e}") from None
        rest.append(entry)
        trains.append(dict(train))
    return [(n, p, t) for (n, p), t in zip(precision_changes(key, rest), trains, strict=True)]


def resource_rules(rules: list[Any]) -> list[tuple[float | None, dict[str, Any]]]:
    """``sweep.resources`` as ``(max_params or None, {launcher key: value})``; one-line ``ValueError``
    naming the field on bad input."""
    out = []
    for i, rule in enumerate(rules):
        key = f"sweep.resources[{i}]"
        if not isinstance(rule, dict):
            raise ValueError(f"{key}={rule!r} must be a map {{max_params: N or null, launcher: {{...}}}}")
        unknown = sorted(set(rule) - {"max_params", "launcher"})
        if unknown:
            raise ValueError(f"{key} has unknown field(s) {unknown}; its fields are: max_params, launcher")
        limit = rule.get("max_params")
        if limit is not None:
            try:
                ok = not isinstance(limit, bool) and float(limit) > 0
            except (TypeError, ValueError):
                ok = False
            if not ok:
                raise ValueError(f"{key}.max_params={limit!r} must be a positive number or null (any size)")
            limit = float(limit)
        launcher = rule.get("launcher")
        if not isinstance(launcher, dict) or not launcher:
            raise ValueError(
                f"{key}.launcher={launcher!r} must be a non-empty map of hydra.launcher keys, "
                "e.g. {timeout_min: 10}"
            )
        out.append((limit, dict(launcher)))
    return out


def resource_rule(rules: list[tuple[float | None, dict[str, Any]]], n_params: float) -> int | None:
    """The index of the first rule whose max_params ≥ n_params (None: no rule covers it)."""
    for i, (limit, _) in enumerate(rules):
        if limit is None or limit >= n_params:
            return i
    return None


# ---------------------------------------------------------------------------------------------
# Resolvers, registered on import (launch.py and every job process import this module). They make a
# run's directory the same on every rank of a torchrun (DDP) launch: each rank composes the config
# itself, and two ranks starting a second apart must not get two run directories, or find two
# different checkpoints when they resume.


@functools.cache
def launch_time(fmt: str) -> str:
    """``${launch_time:%Y%m%d-%H%M%S}``: the start of this launch, formatted. Under torchrun it is the
    start of the elastic agent that spawned the ranks (shared by all of them); otherwise now."""
    if int(os.environ.get("GROUP_WORLD_SIZE", "1")) > 1:
        raise ValueError(
            "a multi-node torchrun launch cannot agree on a default run directory; pass out_dir=... "
            "(the same path on every node)"
        )
    start = _agent_start() if "TORCHELASTIC_RUN_ID" in os.environ else None
    return datetime.fromtimestamp(start or time.time()).strftime(fmt)


def _agent_start() -> float | None:
    """Unix start time of the parent process (torchrun's agent) from /proc, or None off Linux."""
    try:
        fields = Path(f"/proc/{os.getppid()}/stat").read_text().rsplit(")", 1)[1].split()
        btime = next(float(line.split()[1]) for line in open("/proc/stat") if line.startswith("btime"))
        return btime + int(fields[19]) / os.sysconf("SC_CLK_TCK")  # field 22, starttime in ticks
    except (OSError, ValueError, IndexError, StopIteration):
        return None


def default_out_dir(task: str) -> str:
    """``${default_out_dir:${task}}``, the run directory when ``out_dir`` is not given: under ``-m``
    (a job of a sweeper that does not set ``out_dir`` itself, e.g. ``hydra/sweeper=basic``) the job's
    own Hydra directory ``<sweep dir>/<job number>``, so two jobs never share one; else
    ``outputs/runs/<task>-<launch time>``. (The mxsweep sweeper names every run's directory itself.)"""
    try:
        from hydra.core.hydra_config import HydraConfig
        from hydra.types import RunMode

        hydra = HydraConfig.get()
        if hydra.mode == RunMode.MULTIRUN:
            return str(Path(hydra.sweep.dir) / str(hydra.sweep.subdir))
    except Exception:  # no Hydra context (tests composing by hand), or a sweeper planning (no job yet)
        pass
    return f"outputs/runs/{task}-{launch_time('%Y%m%d-%H%M%S')}"


def sweep_dir_name(name: str | None) -> str:
    """``${sweep_dir_name:${sweep.name}}``: ``sweep.name``, else ``multirun-<launch time>``."""
    return str(name) if name else launch_time("multirun-%Y%m%d-%H%M%S")


def rank0_only(value: str) -> str | None:
    """``${rank0_only:.hydra}``: ``value`` on rank 0 and None on the others (hydra.output_subdir: one
    copy of the composed config per run, not one per rank)."""
    return value if is_main() else None


OmegaConf.register_new_resolver("launch_time", launch_time, replace=True)
OmegaConf.register_new_resolver("rank0_only", rank0_only, replace=True)
OmegaConf.register_new_resolver("sweep_dir_name", sweep_dir_name, replace=True)
OmegaConf.register_new_resolver("default_out_dir", default_out_dir, replace=True)
