"""Run schemas: ``PrecisionConfig``, ``ScheduleEntry``, ``TrainConfig`` and ``RunConfig``.

Plain (non-slots) dataclasses, so they double as OmegaConf structured configs: ``launch.py`` composes
the Hydra config and hands ``OmegaConf.to_object(cfg)`` down here, which runs every ``__post_init__``.
An invalid value fails at construction with a one-line message naming the field and the fix.

Step convention used throughout ``train/``: ``step`` counts *completed* optimizer updates. The update
that takes the run from step s to s+1 uses ``task.batch(s)`` and its loss is logged as step s+1. A
``ScheduleEntry(step=s, ...)`` changes the policy before that update, i.e. from step s on; a checkpoint
"at step k" holds the state after k updates.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import typing
from dataclasses import dataclass, field
from typing import Any

from models import ModelConfig
from quant import QuantPolicy
from records.precision import label as precision_label
from train.data import DataConfig
from train.tasks import task_spec

LR_SCHEDULES = ("cosine", "constant")
AUTOCASTS = ("none", "bf16")
WANDB_MODES = ("auto", "online", "offline", "disabled")


class _PrecisionMethods:
    """Behaviour of ``PrecisionConfig`` (its fields are generated from ``quant.QuantPolicy`` below)."""

    def __post_init__(self):
        self.exclude = list(self.exclude)
        self.policy()  # unknown formats and bad combinations fail now, not mid-run

    def policy(self, seed: int = 0) -> QuantPolicy:
        """The frozen ``QuantPolicy`` this config describes; ``seed`` seeds stochastic rounding."""
        return QuantPolicy(**dataclasses.asdict(self), seed=seed)  # QuantPolicy makes exclude a tuple

    def label(self) -> str:
        """The precision's label built from its settings (``records.precision.label``)."""
        return precision_label(dataclasses.asdict(self))

    def replace(self, **changes: Any) -> PrecisionConfig:
        """A copy with ``changes`` applied (validated)."""
        unknown = set(changes) - {f.name for f in dataclasses.fields(self)}
        if unknown:
            raise ValueError(f"precision has no field(s) {sorted(unknown)}; check the schedule entry keys")
        return dataclasses.replace(self, **changes)


_NOT_CONFIGURED = ("seed",)  # stochastic rounding is seeded by the run's train.seed (train.loop)


def _precision_fields() -> list[tuple[str, Any, Any]]:
    """``quant.QuantPolicy``'s fields, as a mutable config: tuples become lists (OmegaConf has none)."""
    hints = typing.get_type_hints(QuantPolicy)
    out = []
    for f in dataclasses.fields(QuantPolicy):
        if f.name in _NOT_CONFIGURED:
            continue
        if typing.get_origin(hints[f.name]) is tuple:
            out.append((f.name, list[str], field(default_factory=functools.partial(list, f.default))))
        else:
            out.append((f.name, hints[f.name], field(default=f.default)))
    return out


# The config group is QuantPolicy field for field, generated from it, so the two cannot drift and a new
# policy field is configurable at once. It is a separate class because a frozen dataclass cannot be
# an OmegaConf node. Field meanings: ``quant.QuantPolicy``.
PrecisionConfig = dataclasses.make_dataclass(
    "PrecisionConfig",
    _precision_fields(),
    bases=(_PrecisionMethods,),
    namespace={
        "__module__": __name__,
        "__doc__": "The precision policy as a config group (fields: quant.QuantPolicy).",
    },
)


@dataclass
class ScheduleEntry:
    """From ``step`` on, run with the precision fields in ``changes`` (e.g. ``{"w": "bf16"}``)."""

    step: int = 0
    changes: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self):
        if self.step < 0:
            raise ValueError(f"train.schedule[].step must be >= 0, got {self.step}")
        self.changes = dict(self.changes)
        if "exclude" in self.changes:
            raise ValueError("train.schedule[].changes cannot set exclude (fixed at conversion)")


@dataclass
class TrainConfig:
    """Optimisation, cadences and bookkeeping of one run (see the module docstring for steps)."""

    steps: int = 1000
    batch_size: int = 32
    lr: float = 1e-3
    norm_lr_mult: float = 1.0
    """LayerNorm/RMSNorm parameters (γ, β) train at ``norm_lr_mult × lr``: < 1 holds γ near its init
    of 1 longer (inside the E4M3 clamp zone (0.875, 1) of the instability study for longer)."""
    warmup_frac: float = 0.2
    """Linear warm-up over this fraction of ``steps`` (cosine schedule only)."""
    min_lr_frac: float = 0.1
    """Cosine decays to ``min_lr_frac × lr`` at the last step."""
    lr_schedule: str | None = None
    """``cosine`` (warm-up then cosine) or ``constant``; None: the task's default (LM cosine, proxy
    constant)."""
    weight_decay: float = 0.0
    """Decoupled (AdamW) decay on matrices of Linear layers only; never norms, embeddings, biases."""
    betas: list[float] | None = None
    """Adam betas; None: the task's default (LM (0.9, 0.95), proxy (0.9, 0.999))."""
    eps: float = 1e-8
    grad_clip: float | None = 1.0
    """Max global grad norm; None disables clipping (the proxy protocol)."""
    eval_every: int = 100
    """Validation loss every this many steps and at the last step; 0 = only at the last step."""
    eval_batches: int = 4
    log_every: int = 1
    ckpt_every: int = 0
    """Checkpoint every this many steps (0 = only at the end and on a signal)."""
    spike_window: int = 100
    spike_threshold: float = 0.008
    seed: int = 0
    twin_every: int = 0
    """Log fp32-twin gradient metrics every this many steps; 0 = no twin."""
    schedule: list[ScheduleEntry] = field(default_factory=list)
    branch_from: str | None = None
    """Run directory whose checkpoint at ``branch_step`` this run starts from (its own policy)."""
    branch_step: int | None = None
    device: str = "cpu"
    """``cpu``, ``cuda`` or ``cuda:<i>``. Under DDP, ``cuda`` means each rank's ``cuda:<LOCAL_RANK>``.
    Whether the device exists is checked when training starts (configs stay buildable anywhere)."""
    autocast: str = "none"
    """``none`` or ``bf16``: forward passes (train and eval) under ``torch.autocast`` with bf16 on
    ``device``; parameters, optimizer state and the fp32 twin stay fp32."""

    def __post_init__(self):
        for name, low in (("steps", 1), ("batch_size", 1), ("eval_batches", 1), ("log_every", 1)):
            if getattr(self, name) < low:
                raise ValueError(f"train.{name} must be >= {low}, got {getattr(self, name)}")
        for name in ("eval_every", "ckpt_every", "twin_every"):
            if getattr(self, name) < 0:
                raise ValueError(f"train.{name} must be >= 0 (0 = off), got {getattr(self, name)}")
        if not (self.lr > 0 and math.isfinite(self.lr)):
            raise ValueError(f"train.lr must be a finite number > 0, got {self.lr}")
        if not (self.norm_lr_mult > 0 and math.isfinite(self.norm_lr_mult)):
            raise ValueError(
                f"train.norm_lr_mult must be > 0 (1 = the same LR as the rest), got {self.norm_lr_mult}"
            )
        if not 0 <= self.warmup_frac < 1:
            raise ValueError(f"train.warmup_frac must be in [0, 1), got {self.warmup_frac}")
        if not 0 <= self.min_lr_frac <= 1:
            raise ValueError(f"train.min_lr_frac must be in [0, 1], got {self.min_lr_frac}")
        if self.lr_schedule is not None and self.lr_schedule not in LR_SCHEDULES:
            raise ValueError(f"train.lr_schedule={self.lr_schedule!r}; use one of {LR_SCHEDULES} or null")
        if not (self.weight_decay >= 0 and math.isfinite(self.weight_decay)):
            raise ValueError(f"train.weight_decay must be a finite number >= 0, got {self.weight_decay}")
        if not (self.eps > 0 and math.isfinite(self.eps)):
            raise ValueError(f"train.eps must be a finite number > 0 (Adam's denominator), got {self.eps}")
        if self.betas is not None:
            self.betas = [float(b) for b in self.betas]
            if len(self.betas) != 2 or not all(0 <= b < 1 for b in self.betas):
                raise ValueError(f"train.betas must be two numbers in [0, 1), got {self.betas}")
        if self.grad_clip is not None and not self.grad_clip > 0:
            raise ValueError(f"train.grad_clip must be > 0 or null (no clipping), got {self.grad_clip}")
        if self.spike_window < 1 or not self.spike_threshold > 0:
            raise ValueError("train.spike_window must be >= 1 and train.spike_threshold > 0")
        self.schedule = [e if isinstance(e, ScheduleEntry) else ScheduleEntry(**e) for e in self.schedule]
        steps = [e.step for e in self.schedule]
        if steps != sorted(steps) or any(s >= self.steps for s in steps):
            raise ValueError(
                f"train.schedule steps must be sorted and < train.steps={self.steps}, got {steps}"
            )
        if (self.branch_from is None) != (self.branch_step is None):
            raise ValueError("train.branch_from and train.branch_step must be set together")
        if self.branch_step is not None and not 0 < self.branch_step < self.steps:
            raise ValueError(f"train.branch_step must be in (0, train.steps), got {self.branch_step}")
        kind, _, index = self.device.partition(":")
        if kind not in ("cpu", "cuda") or (index and (kind == "cpu" or not index.isdigit())):
            raise ValueError(f"train.device={self.device!r}; use cpu, cuda or cuda:<index>")
        if self.autocast not in AUTOCASTS:
            raise ValueError(f"train.autocast={self.autocast!r}; use one of {AUTOCASTS}")


@dataclass
class WandbConfig:
    """Weights & Biases logging of a run (``train.wandb_logger``); the run record never depends on it.

    ``mode``: ``online``, ``offline`` (written under ``<out_dir>/wandb``; upload later with
    ``wandb sync <out_dir>/wandb/offline-run-*``), ``disabled`` (wandb is not even imported), or
    ``auto``: ``$WANDB_MODE`` if set, else ``online`` when an API key is configured (``WANDB_API_KEY``
    or a ``~/.netrc`` entry for the wandb host), else ``offline``."""

    mode: str = "auto"
    project: str = "mxsweep"
    entity: str | None = None
    """Team or user; None: wandb's default entity of the API key."""
    group: str | None = None
    """Runs of one sweep share a group (the sweep name); None: no group."""
    tags: list[str] = field(default_factory=list)
    """Extra tags; ``precision:<label>`` (the run's one precision label) and ``task:<task>`` are always
    added."""

    def __post_init__(self):
        if self.mode not in WANDB_MODES:
            raise ValueError(f"logger.wandb.mode={self.mode!r}; use one of {WANDB_MODES}")
        if not self.project:
            raise ValueError("logger.wandb.project must be a non-empty name")
        self.tags = [str(t) for t in self.tags]
        long = [t for t in self.tags if not 0 < len(t) <= 64]
        if long:
            raise ValueError(f"logger.wandb.tags must be 1..64 characters each, got {long}")


@dataclass
class LoggerConfig:
    """Where a run's metrics go besides its run directory (which is always written)."""

    wandb: WandbConfig = field(default_factory=WandbConfig)
    console_every_s: float = 10.0
    """A single run prints a progress line (step, loss, val loss, lr, tokens/s, ETA) at most this
    often, in seconds (sweeps show their progress bar instead); 0: none."""
    label: str | None = None
    """The precision's name in records, reports and wandb (``records.precision.label``): a sweep sets
    it to ``sweep.precisions[].name`` where the preset names its precisions; null: built from the
    precision settings."""
    budget: float | None = None
    """The nominal compute budget C (FLOPs, 6·N·D) this run stands for in its sweep (set by the
    sweeper; wandb's ``config.mxsweep.budget``); null for a single run or a sweep without budgets."""

    def __post_init__(self):
        if not self.console_every_s >= 0:
            raise ValueError(f"logger.console_every_s={self.console_every_s} must be >= 0 (seconds; 0: off)")


def build_section(key: str, schema: type, values: dict[str, Any]) -> Any:
    """``schema(**values)``; unknown keys fail in one line naming the schema's fields."""
    fields = [f.name for f in dataclasses.fields(schema)]
    unknown = sorted(set(values) - set(fields))
    if unknown:
        raise ValueError(
            f"{key}.{unknown[0]} is not a field of {schema.__name__}; its fields: {', '.join(fields)}"
        )
    return schema(**values)


@dataclass
class RunConfig:
    """One training run: task, model sizes, precision, optimisation, data, output directory."""

    task: str = "proxy"
    """A registered task (``train.tasks.TASKS``): ``lm`` or ``proxy``."""
    model: ModelConfig = field(default_factory=ModelConfig)
    """The task's model schema (``LMConfig`` for ``lm``, ``ProxyConfig`` for ``proxy``; the ``model``
    config group). Declared as the base: OmegaConf takes the subclass an option is typed by."""
    precision: PrecisionConfig = field(default_factory=PrecisionConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    data: DataConfig | None = None
    """The task's data schema (``DataConfig`` for ``lm``, the ``data`` group); None for the proxy,
    which draws its own inputs. Unset for the LM: ``DataConfig()``."""
    out_dir: str = "runs/unnamed"
    logger: LoggerConfig = field(default_factory=LoggerConfig)
    """Logging only: not part of the run's identity (a resume may change it)."""

    def __post_init__(self):
        spec = task_spec(self.task)
        if isinstance(self.model, dict):
            self.model = build_section("model", spec.model, self.model)
        elif type(self.model) is ModelConfig:  # no model given: the task's defaults
            self.model = spec.model()
        if not isinstance(self.model, spec.model):
            raise ValueError(
                f"model is a {type(self.model).__name__} but task={self.task} needs a {spec.model.__name__}: "
                f"choose a model option of that task (or task=<the model's task>)"
            )
        if spec.data is None:
            self.data = None  # the task draws its own inputs
        elif self.data is None:
            self.data = spec.data()
        elif isinstance(self.data, dict):
            self.data = build_section("data", spec.data, self.data)
        if not self.out_dir:
            raise ValueError("out_dir must be a non-empty path")
        for entry in self.train.schedule:  # every scheduled policy must be valid up front
            self.precision_at(entry.step)

    @property
    def label(self) -> str:
        """The one precision label of this run (``logger.label``, else built from ``precision``)."""
        return self.logger.label or self.precision.label()

    def precision_at(self, step: int) -> PrecisionConfig:
        """The precision in force for the update from ``step`` to ``step + 1``."""
        prec = self.precision
        for entry in self.train.schedule:
            if entry.step <= step:
                prec = prec.replace(**entry.changes)
        return prec
