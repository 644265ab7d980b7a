"""Bad input, in both modes: every variant is refused with a message that names the field, before any
run is planned or written (issue 11's list of variants; the end-to-end exit-2-and-nothing-written path
is tests/test_launch.py's, on a sample of them).

Single run: the checks ``launch.main`` makes (``sweep_only_keys``, then ``to_run_config``). Sweep: the
sweeper's planning (``sweep_settings``, ``to_run_config``, ``expand``) on the smoke preset.
"""

from __future__ import annotations

import pytest
from hydra import compose, initialize_config_dir
from hydra.errors import HydraException
from launching import REPO
from omegaconf.errors import OmegaConfBaseException

import launch  # noqa: F401 -- registers the root schema (run_schema) in Hydra's ConfigStore
from sweeper.config import sweep_only_keys, sweep_settings, to_run_config
from sweeper.grid import SweepError, expand

# (override(s), text the error must contain: the field); the same list for both modes
CASES = [
    ("precision.w=fp9_e4m3", "precision.w"),
    ("precision.a=nope", "precision.a"),
    ("precision.w_bwd=nope", "precision.w_bwd"),
    ("precision.g_dgrad=fp3", "precision.g_dgrad"),
    ("precision.g_wgrad=int3", "precision.g_wgrad"),
    ("precision.block_size=0", "precision.block_size"),
    ("precision.block_size=-4", "precision.block_size"),
    ("precision.scale=e9m9", "precision.scale"),
    ("precision.scale_rule=round", "precision.scale_rule"),
    ("precision.rounding=up", "precision.rounding"),
    ("precision.grad_rounding=up", "precision.grad_rounding"),
    ("precision.norm_affine=fp99", "precision.norm_affine"),
    ("precision.norm_scale_rule=nope", "precision.norm_scale_rule"),
    ("precision.grad_scale_rule=nope", "precision.grad_scale_rule"),
    (
        "precision.w=mxfp4_e2m1 precision.a=mxfp4_e2m1 precision.grad_scale_rule=ceil",
        "precision.grad_scale_rule",
    ),
    ("precision.vector_ops=fp8", "precision.vector_ops"),
    ("precision.w=nvfp4 precision.a=nvfp4 precision.block_size=8", "precision.block_size"),
    ("precision.w=mxfp8_e4m3 precision.a=mxfp8_e4m3 precision.scale_rule=ceil", "precision.scale_rule"),
    ("precision.w=fp4_e2m1 precision.a=fp4_e2m1 precision.global_scale=true", "precision.global_scale"),
    ("precision.w=mxfp4_e2m1 precision.a=mxfp4_e2m1 precision.global_scale=true", "precision.global_scale"),
    ("precision.exclude=5", "precision.exclude"),
    ("model.depth=0", "model.depth"),
    ("model.depth=-2", "model.depth"),
    ("train.steps=0", "train.steps"),
    ("train.steps=-5", "train.steps"),
    ("train.batch_size=0", "train.batch_size"),
    ("train.lr=0", "train.lr"),
    ("train.lr=-1", "train.lr"),
    ("train.lr=inf", "train.lr"),
    ("train.lr=nan", "train.lr"),
    ("train.weight_decay=-1", "train.weight_decay"),
    ("train.weight_decay=nan", "train.weight_decay"),
    ("train.eps=0", "train.eps"),
    ("train.eps=-1", "train.eps"),
    ("train.eps=inf", "train.eps"),
    ("train.warmup_frac=1", "train.warmup_frac"),
    ("train.warmup_frac=-0.1", "train.warmup_frac"),
    ("train.min_lr_frac=2", "train.min_lr_frac"),
    ("train.lr_schedule=linear", "train.lr_schedule"),
    ("train.betas=[0.9]", "train.betas"),
    ("train.betas=[1.0,0.9]", "train.betas"),
    ("train.grad_clip=0", "train.grad_clip"),
    ("train.spike_window=0", "train.spike_window"),
    ("train.spike_threshold=0", "train.spike_threshold"),
    ("train.eval_every=-1", "train.eval_every"),
    ("train.ckpt_every=-1", "train.ckpt_every"),
    ("train.twin_every=-1", "train.twin_every"),
    ("train.log_every=0", "train.log_every"),
    ("train.eval_batches=0", "train.eval_batches"),
    ("train.norm_lr_mult=0", "train.norm_lr_mult"),
    ("train.norm_lr_mult=inf", "train.norm_lr_mult"),
    ("train.schedule=[{step:-1}]", "train.schedule"),
    ("train.steps=abc", "train.steps"),
    ("train.lr=fast", "train.lr"),
    ("logger.wandb.mode=sometimes", "logger.wandb.mode"),
    ("logger.console_every_s=-1", "logger.console_every_s"),
    ("+nonsense_key=1", "nonsense_key"),
    ("+trian.steps=5", "trian"),
    ("train.stpes=5", "train.stpes"),
    ("task=nope", "task"),
]


def _hydra():
    """Hydra's context, as launch.py has it: composing, and the precision options sweeps name."""
    return initialize_config_dir(config_dir=str(REPO / "conf"), version_base="1.3")


def _compose(*overrides: str):
    return compose("config", overrides=["logger=disabled", *overrides])


def _refusal(fn) -> str:
    try:
        with _hydra():
            fn()
    except (ValueError, SweepError, HydraException, OmegaConfBaseException) as e:
        return str(e)
    return ""


def test_the_list_is_long_enough():
    assert len(CASES) >= 55 and len({c for c, _ in CASES}) == len(CASES)


@pytest.mark.parametrize(("override", "field"), CASES, ids=[c for c, _ in CASES])
def test_a_single_run_refuses(override, field):
    def check():
        cfg = _compose("task=proxy", *override.split())
        if keys := sweep_only_keys(cfg):
            raise ValueError(f"{', '.join(keys)}: sweep settings need -m")
        to_run_config(cfg)

    message = _refusal(check)
    assert message and field in message, f"{override}: {message!r}"


@pytest.mark.parametrize(("override", "field"), CASES, ids=[c for c, _ in CASES])
def test_a_sweep_refuses_before_planning_any_run(override, field, tmp_path):
    def check():
        cfg = _compose("experiment=smoke", *override.split())
        sweep, budget = sweep_settings(cfg)
        expand(to_run_config(cfg), sweep, budget, tmp_path / "s")

    message = _refusal(check)
    assert message and field in message, f"{override}: {message!r}"
    assert not (tmp_path / "s").exists()


@pytest.mark.parametrize(
    ("override", "field"),
    [("budget.flops=[0]", "budget.flops"), ("sweep.rerun=bogus", "sweep.rerun"),
     ("sweep.seeds=[-1]", "seed"), ("budget.ratio_min=300", "ratio"), ("sweep.branch_at=[1.5]", "branch_at")],
)  # fmt: skip
def test_sweep_settings_refuse_in_a_sweep_and_without_m(override, field, tmp_path):
    def sweep_mode():
        cfg = _compose("experiment=smoke", override)
        sweep, budget = sweep_settings(cfg)
        expand(to_run_config(cfg), sweep, budget, tmp_path / "s")

    assert field in _refusal(sweep_mode)
    with _hydra():
        assert sweep_only_keys(_compose("task=proxy", override))  # without -m: refused as sweep-only


# The sweeper's own settings (sweep.*, budget.*): refused while planning, before any run is written;
# tests/test_sweeper.py runs a sample of them end to end (one line, exit 2, no sweep directory).
SWEEP_CASES = [
    (["sweep.w=[fp9_e4m3]", "sweep.a=[bf16]"], "precision.w='fp9_e4m3' is not a known format"),
    (["sweep.precisions=[{name:x,w:fp8_e4m3,nrm_affine:bf16}]"], "sweep.precisions[0] has unknown field"),
    (["budget.flops=[-1e9]"], "budget.flops[0]"),
    (["budget.ratio_min=0.5"], "no (budget, shape) pair has 0.5 < D/N < 1"),
    (["budget.ratio_min=2"], "budget.ratio_min=2 / budget.ratio_max=1"),
    (["train.lrr=0.1"], "train.lrr"),
    (["sweep.rerun=everything"], "sweep.rerun='everything'"),
    (["sweep.branch_parents=[mx_ln]"], "sweep.branch_parents=['mx_ln']: 'mx_ln' is not a name in sweep."),
    (
        ["sweep.branch_step=10", "sweep.branches=[{name:b,train:{steps:5}}]"],
        "sweep.branches[0].train has unknown",
    ),
    (
        ["sweep.branch_step=10", "sweep.branches=[{train:{betas:[0.9,0.95]}}]"],
        "sweep.branches[0] changes train",
    ),
    (
        ["sweep.branch_step=10", "sweep.branches=[{name:b,train:{betas:[0.9,1.5]}}]"],
        "sweep.branches[0].train: train.betas",
    ),
    (["sweep.branch_ckpt_every=-1"], "sweep.branch_ckpt_every=-1 must be >= 0"),
    (["experiment=nope"], "experiment/nope"),
    (["sweep.resources=[{max_params:big,launcher:{mem_gb:2}}]"], "sweep.resources[0].max_params='big'"),
    (["sweep.resources=[{max_params:null}]"], "sweep.resources[0].launcher=None"),
    (["sweep.resources=[{max_params:1e6,launcher:{mem_gb:2},gpus:1}]"], "sweep.resources[0] has unknown"),
]


@pytest.mark.parametrize(("overrides", "named"), SWEEP_CASES)
def test_bad_sweep_settings_are_refused_before_planning(overrides, named, tmp_path):
    def check():
        cfg = _compose("experiment=smoke", *overrides)
        sweep, budget = sweep_settings(cfg)
        expand(to_run_config(cfg), sweep, budget, tmp_path / "sw")

    assert named in _refusal(check)
    assert not (tmp_path / "sw").exists()
