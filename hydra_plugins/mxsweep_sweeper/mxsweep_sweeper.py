"""``hydra/sweeper=mxsweep``: the Hydra side of ``sweeper/`` (the default sweeper of ``conf/config.yaml``).

``python launch.py -m experiment=precision_grid [key=a,b ...]`` composes one config per combination of
ordinary sweep overrides (``key=a,b``, ``range(...)``, and this plugin's ``params``), expands each with
``sweeper.grid`` (precisions × budgets × shapes × seeds, then the branch phase), and hands the job
overrides to whatever launcher Hydra is configured with (basic, joblib, submitit_local,
submitit_slurm), one phase at a time. Importing this module stays cheap (Hydra scans every plugin on
each start): the work is imported inside ``sweep``.
"""

import contextlib
import functools
import itertools
import logging
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any  # no PEP 563 (future annotations): Hydra execs plugins outside sys.modules

from hydra.core.config_store import ConfigStore
from hydra.plugins.sweeper import Sweeper
from hydra.types import HydraContext, TaskFunction
from omegaconf import DictConfig


@dataclass
class MxSweeperConf:
    _target_: str = "hydra_plugins.mxsweep_sweeper.mxsweep_sweeper.MxSweeper"
    max_batch_size: int | None = None
    """Launch at most this many jobs per launcher call (None: one call per phase)."""
    params: dict[str, str] | None = None
    """Ordinary sweep overrides defined by a config, e.g. ``{train.lr: "1e-3,3e-3"}`` (as Hydra's basic
    sweeper)."""


ConfigStore.instance().store(group="hydra/sweeper", name="mxsweep", node=MxSweeperConf, provider="mxsweep")


class MxSweeper(Sweeper):
    def __init__(self, max_batch_size: int | None = None, params: dict[str, str] | None = None) -> None:
        super().__init__()
        self.max_batch_size = max_batch_size
        self.params = dict(params or {})
        self.hydra_context: HydraContext | None = None
        self.config: DictConfig | None = None
        self.launcher = None

    def setup(self, *, hydra_context: HydraContext, task_function: TaskFunction, config: DictConfig) -> None:
        from hydra.core.plugins import Plugins

        self.hydra_context, self.config = hydra_context, config
        self.launcher = Plugins.instance().instantiate_launcher(
            hydra_context=hydra_context, task_function=task_function, config=config
        )

    def sweep(self, arguments: list[str]) -> Any:
        from sweeper.sweep import dry_run, execute

        assert self.config is not None
        settings = self.config.sweep
        tic = time.perf_counter()
        plan = self.plan(arguments)
        if settings.dry_run:
            decisions = dry_run(plan)
            print(f"planned and previewed in {time.perf_counter() - tic:.2f} s")
            return decisions
        from omegaconf import OmegaConf

        plan.sweep_dir.mkdir(parents=True, exist_ok=True)
        OmegaConf.save(self.config, plan.sweep_dir / "multirun.yaml")  # as Hydra's basic sweeper does
        with _quiet_console():
            return execute(plan, self._launch, progress=bool(settings.progress))

    def plan(self, arguments: list[str]) -> Any:
        """The typed, validated ``sweeper.sweep.Sweep`` of these overrides (nothing is written)."""
        from sweeper.config import resource_rules, sweep_settings, to_run_config
        from sweeper.grid import SweepError, branch, expand
        from sweeper.sweep import Sweep, check_unique

        assert self.config is not None and self.hydra_context is not None
        sweep_dir = Path(str(self.config.hydra.sweep.dir)).absolute()
        name = str(self.config.sweep.name or sweep_dir.name)
        loader = self.hydra_context.config_loader
        phase1, phase2, last, auto = [], [], None, []
        for combo, swept in self.combinations(arguments):
            where = f" (with {' '.join(f'{k}={v}' for k, v in swept.items())})" if swept else ""
            cfg = loader.load_sweep_config(self.config, combo)
            if cfg.get("study") is not None:
                raise SweepError(
                    f"study.name={cfg.study.name} is a single study, not a sweep: run it without -m "
                    f"(python launch.py experiment=...)"
                )
            try:
                base = to_run_config(cfg)
                sweep, budget = sweep_settings(cfg)
                runs = expand(base, sweep, budget, sweep_dir, combo, swept)
            except ValueError as e:
                raise SweepError(f"{e}{where}") from None
            _check_conflicts(combo, runs[0].settings)
            phase1 += runs
            if sweep.branches and not sweep.branch_at:
                phase2 += branch(runs, sweep, sweep_dir)
            elif sweep.branches:
                auto.append((runs, sweep))
            last = sweep
        check_unique(phase1 + phase2)
        rules = resource_rules(last.resources)
        if rules and not self._launcher_params():  # before the checks: ignored rules need not fit
            target = self.config.hydra.launcher.get("_target_")
            print(f"sweep.resources ignored: {target} has no per-job resources (use a submitit launcher)",
                  file=sys.stderr)  # fmt: skip
            rules = []
        self._check_resources(rules, phase1 + phase2)
        meta = {
            "argv": sys.argv,
            "cwd": os.getcwd(),
            "launcher": str(self.config.hydra.launcher.get("_target_")),
        }
        phases = [p for p in (phase1, phase2) if p]
        deferred = functools.partial(_spike_branches, auto, sweep_dir) if auto else None
        return Sweep(name, sweep_dir, phases, last.rerun, last.throughput, meta, deferred, rules)

    def _launcher_params(self) -> dict[str, Any] | None:
        """The launcher's executor parameters (hydra-submitit-launcher keeps them in ``params``)."""
        params = getattr(self.launcher, "params", None)
        return params if isinstance(params, dict) else None

    def _check_resources(self, rules: list[tuple[float | None, dict[str, Any]]], runs: list[Any]) -> None:
        from sweeper.config import resource_rule
        from sweeper.grid import SweepError

        params = self._launcher_params() or {}  # rules are only kept for a launcher with params
        for i, (_, launcher) in enumerate(rules):
            unknown = sorted(set(launcher) - set(params))
            if unknown:
                raise SweepError(
                    f"sweep.resources[{i}].launcher has unknown key(s) {unknown}; "
                    f"hydra.launcher takes: {', '.join(sorted(params))}"
                )
        for p in runs if rules else []:
            if resource_rule(rules, p.coords["N"]) is None:
                raise SweepError(
                    f"sweep.resources: no rule has max_params >= N={p.coords['N']} (run {p.name}); "
                    "end the list with a rule of max_params: null"
                )

    def combinations(self, arguments: list[str]) -> list[tuple[list[str], dict[str, str]]]:
        """Every combination of the ordinary sweep overrides: (its override list, {swept key: value}).

        A command-line override of a key that the preset sweeps (``hydra.sweeper.params``) replaces
        that axis: ``-m experiment=proxy_lr_sweep model.depth=4`` narrows the preset's depths to 4,
        ``train.lr=1e-3,3e-3`` gives it two values of its own."""
        from hydra.core.override_parser.overrides_parser import OverridesParser

        from sweeper.grid import SweepError

        assert self.hydra_context is not None
        parser = OverridesParser.create(config_loader=self.hydra_context.config_loader)
        given = parser.parse_overrides(list(arguments))
        on_cli = {o.get_key_element() for o in given}
        preset = [f"{k}={v}" for k, v in (self.params or {}).items()]
        kept = [o for o in parser.parse_overrides(preset) if o.get_key_element() not in on_cli]
        axes: list[list[tuple[str, str, bool]]] = []
        for override in kept + given:
            key = override.get_key_element()
            if override.is_sweep_override():
                if not override.is_discrete_sweep():
                    raise SweepError(
                        f"{override.input_line}: the mxsweep sweeper takes lists (a,b) and range() only"
                    )
                axes.append([(key, v, True) for v in override.sweep_string_iterator()])
            else:
                axes.append([(key, override.get_value_element_as_str(), False)])
        out = []
        for combo in itertools.product(*axes):
            out.append(([f"{k}={v}" for k, v, _ in combo], {k: v for k, v, s in combo if s}))
        return out

    def _launch(
        self, batch: list[list[str]], first_job: int, resources: dict[str, Any] | None = None
    ) -> list[Any]:
        """Launch one group of jobs, numbered from ``first_job`` (``sweeper.sweep.execute`` counts them);
        ``resources`` (a ``sweep.resources`` rule's launcher keys) change the launcher's executor
        parameters for this group only."""
        assert self.launcher is not None
        saved = self._launcher_params()
        if resources and saved is not None:
            self.launcher.params = {**saved, **resources}
        try:
            size = self.max_batch_size or len(batch)
            returns = []
            for i in range(0, len(batch), size):
                returns += list(self.launcher.launch(batch[i : i + size], initial_job_idx=first_job + i))
            return returns
        finally:
            if resources and saved is not None:
                self.launcher.params = saved


@contextlib.contextmanager
def _quiet_console() -> Any:
    """The sweep's console is its own (``sweeper.sweep.Progress``: one line per run and one bar):
    the launchers' INFO lines (``#0 : <every override of the job>``) go to WARNING, and wandb's
    per-run banners are silenced (``WANDB_SILENT``, unless the user set it; wandb records all the
    same). Restored afterwards."""
    names = ("hydra", "hydra_plugins")
    levels = {n: logging.getLogger(n).level for n in names}
    silent = os.environ.get("WANDB_SILENT")
    try:
        for n in names:
            logging.getLogger(n).setLevel(logging.WARNING)
        os.environ.setdefault("WANDB_SILENT", "true")
        yield
    finally:
        for n, level in levels.items():
            logging.getLogger(n).setLevel(level)
        if silent is None:
            os.environ.pop("WANDB_SILENT", None)


def _check_conflicts(combo: list[str], settings: dict[str, Any]) -> None:
    """An override of a key the grid sets per run would be silently lost: refuse it."""
    from sweeper.grid import SweepError

    for line in combo:
        key = line.split("=", 1)[0].lstrip("+~")
        if key in settings and key not in ("logger.wandb.group",):
            hint = {
                "out_dir": "set sweep.name or hydra.sweep.dir instead",
                "hydra.sweep.subdir": "the sweeper names run directories itself",
                "logger.label": "name the precision in sweep.precisions ({name: ..., ...}) instead",
                "logger.budget": "it is the run's budget.flops value",
            }.get(key, "change the sweep axes (sweep.*, budget.*) instead")
            raise SweepError(f"{line}: {key} is set per run by the sweep; {hint}")


def _spike_branches(groups: list, sweep_dir: Path) -> list:
    """``sweep.branch_at``: the branches of every parent that has finished with a spike, at each
    fraction in ``branch_at`` of its first-spike step (``records.spike_branch_step``; two
    fractions that round to the same checkpoint give one set of branches)."""
    from records import spike_branch_step
    from sweeper.grid import branch
    from sweeper.status import read_summary

    def step_of(fraction: float, parent: Any) -> Any:
        summary = read_summary(parent.out_dir)
        if not summary or summary.get("status") not in ("done", "diverged"):
            return None
        return spike_branch_step(summary, fraction, parent.run.train.ckpt_every)

    out = []
    for runs, sweep in groups:
        seen: set[str] = set()
        for fraction in sweep.branch_at:
            for planned in branch(runs, sweep, sweep_dir, functools.partial(step_of, fraction)):
                if planned.run_id not in seen:
                    seen.add(planned.run_id)
                    out.append(planned)
    return out
