"""Every experiment preset (conf/experiment/) composes, expands, and runs end to end on a tiny budget:
a preset nobody ran is a broken preset. The tiny overrides keep each preset's axes (all 25 W × A pairs,
every recipe, the LR × depth × width params, both phases) and shrink sizes, steps and data; paper_llm,
precision_grid's grid on another model and data, runs 2 × 2 of its pairs."""

from __future__ import annotations

import inspect
import json

import launching
import pytest
from hydra import compose, initialize_config_dir
from launching import REPO

import launch  # registers the root schema (run_schema) and the group schemas in Hydra's ConfigStore
from quant.policy import ROLES
from records.identity import run_id
from sweeper.config import sweep_settings, to_run_config
from sweeper.grid import branch, expand

PRESETS = sorted(p.stem for p in (REPO / "conf" / "experiment").glob("*.yaml"))
LOGGER = ["logger=disabled"]

TINY_LM = [  # synthetic bytes, 2 × 16 tokens per step, one 32-wide shape, a handful of steps
    "data.source=synthetic",
    "data.synthetic_bytes=4096",
    "data.seq_len=16",
    "train.batch_size=2",
    "train.eval_batches=1",
    "budget.geomspace=[]",
    "budget.flops=[2e7]",
    "budget.depths=[]",
    "budget.ladder=[{depth:1,d_model:32,n_heads:2}]",
    "budget.ratio_min=0",
    "budget.ratio_max=1",
    "budget.evals=1",
]
TINY_PROXY = ["train.steps=2", "train.batch_size=8", "train.eval_every=0", "train.eval_batches=1"]
TINY_BRANCHED = [*TINY_PROXY, "model.width=16", "train.ckpt_every=1", "train.steps=4", "sweep.branch_at=[]",
                 "sweep.branch_step=2"]  # fmt: skip
TINY = {
    "smoke": [],
    "precision_grid": TINY_LM,
    "hybrid_fixes": TINY_LM,
    "lm_precisions": [*TINY_LM, "sweep.seeds=[0]"],
    "lm_format_error": [*TINY_LM, "sweep.seeds=[3]"],
    "lm_scale_rule": [*TINY_LM, "sweep.seeds=[9]"],
    "lm_grad_sr": [*TINY_LM, "sweep.seeds=[15]"],
    "lm_block_scale": [*TINY_LM, "sweep.seeds=[21]"],
    "lm_block_grads": [*TINY_LM, "sweep.seeds=[27]"],
    "lm_block_global": [*TINY_LM, "sweep.seeds=[33]"],
    "lm_block_e8m0": [*TINY_LM, "sweep.seeds=[39]"],
    "lm_block_ceil": [*TINY_LM, "sweep.seeds=[45]"],
    "lm_block_grads_fresh": [*TINY_LM, "sweep.seeds=[51]"],
    "lm_grad_sr_recipes": [*TINY_LM, "sweep.seeds=[57]"],
    "lm_grad_sr_clamp": [*TINY_LM, "sweep.seeds=[63]"],
    "lm_grad_sr_gceil": [*TINY_LM, "sweep.seeds=[69]"],
    "lm_grad_sr_forward": [*TINY_LM, "sweep.seeds=[75]"],
    "lm_grad_sr_blocks": [*TINY_LM, "sweep.seeds=[81]"],
    "lm_grad_sr_equiv": [*TINY_LM, "sweep.seeds=[87]"],
    "lm_spikes_pilot": TINY_LM,
    "lm_spikes": [*TINY_LM, "sweep.seeds=[95]"],
    "lm_spikes_fixes": [*TINY_LM, "sweep.seeds=[101]"],
    "lm_spikes_clamp": [*TINY_LM, "sweep.seeds=[109]"],
    "lm_spikes_ceil": [*TINY_LM, "sweep.seeds=[115]"],
    "lm_spikes_fwd_ceil": [*TINY_LM, "sweep.seeds=[121]"],
    "lm_spikes_e5m2_roles": [*TINY_LM, "sweep.seeds=[129]"],
    "lm_spikes_e5m2_grads": [*TINY_LM, "sweep.seeds=[137]"],
    "lm_spikes_e5m2_head": [*TINY_LM, "sweep.seeds=[145]"],
    "lm_spikes_e5m2_lr": [*TINY_LM, "sweep.seeds=[151]"],
    "lm_spikes_e5m2_gamma": [*TINY_LM, "sweep.seeds=[157]"],
    "paper_llm": [
        *TINY_LM,
        "model.vocab_size=256",
        "data.path=null",
        "data.val_path=null",
        "data.vocab_size=null",
        "train.device=cpu",
        "sweep.w=[fp8_e4m3,bf16]",  # precision_grid runs all 25 W × A pairs: the same code path
        "sweep.a=[fp8_e4m3,bf16]",
    ],  # fmt: skip
    # the LR axis narrowed from the command line (a tested feature): 2 depths × 2 widths × 4 precisions
    "proxy_lr_sweep": [*TINY_PROXY, "train.twin_every=1", "train.lr=1e-3"],
    "proxy_interventions": [
        *TINY_PROXY,
        "train.steps=6",
        "model.width=16",
        "train.ckpt_every=2",
        "sweep.branch_step=2",
    ],  # fmt: skip
    "proxy_mechanism": [
        *TINY_PROXY,
        "train.steps=8",
        "model.width=16",
        "train.ckpt_every=2",
        "sweep.seeds=[0]",
        "train.spike_window=2",
        "train.spike_threshold=1e-9",  # every rise of the 2-step mean is a "spike": branches are planned
    ],
    "proxy_late_search": [*TINY_PROXY, "model.width=16", "train.ckpt_every=1", "sweep.seeds=[0]"],
    "proxy_late_drift": [*TINY_PROXY, "model.width=16", "train.ckpt_every=1", "sweep.seeds=[0]"],
    "proxy_late_lr": [*TINY_PROXY, "model.width=16", "train.ckpt_every=1", "sweep.seeds=[0]"],
    "proxy_late_norm10": [*TINY_PROXY, "model.width=16", "train.ckpt_every=1", "sweep.seeds=[0]"],
    "proxy_late_wide": [*TINY_PROXY, "model.width=16", "train.ckpt_every=1", "sweep.seeds=[0]"],
    "proxy_mechanism_lr3": [*TINY_PROXY, "model.width=16", "train.ckpt_every=1", "sweep.seeds=[0]"],
    "proxy_mechanism_lr5": [*TINY_PROXY, "model.width=16", "train.ckpt_every=1", "sweep.seeds=[0]"],
    "proxy_mechanism_lr_fine": [*TINY_PROXY, "model.width=16", "train.ckpt_every=1", "sweep.seeds=[0]"],
    "proxy_mechanism_seeds": [*TINY_PROXY, "model.width=16", "train.ckpt_every=1", "sweep.seeds=[8]"],
    "proxy_mechanism_seeds16": [*TINY_PROXY, "model.width=16", "train.ckpt_every=1", "sweep.seeds=[16]"],
    "proxy_mechanism_seeds16_source": [
        *TINY_PROXY,
        "model.width=16",
        "train.ckpt_every=1",
        "sweep.seeds=[16]",
    ],
    "proxy_mechanism_d128": [*TINY_PROXY, "model.width=16", "train.ckpt_every=1", "sweep.seeds=[0]"],
    "proxy_mechanism_d128_b1024": [*TINY_PROXY, "model.width=16", "train.ckpt_every=1", "sweep.seeds=[0]"],
    "proxy_mechanism_d128_b64": [*TINY_PROXY, "model.width=16", "train.ckpt_every=1", "sweep.seeds=[0]"],
    "proxy_mechanism_d128_seeds": [*TINY_PROXY, "model.width=16", "train.ckpt_every=1", "sweep.seeds=[16]"],
    "proxy_mechanism_d128_seeds32": [*TINY_PROXY, "model.width=16", "train.ckpt_every=1", "sweep.seeds=[32]"],
    "proxy_mechanism_d128_seeds40": [*TINY_PROXY, "model.width=16", "train.ckpt_every=1", "sweep.seeds=[40]"],
    "proxy_mechanism_d128_lr": [*TINY_PROXY, "model.width=16", "sweep.seeds=[0]"],
    "proxy_mechanism_d128_lr_fine": [*TINY_PROXY, "model.width=16", "sweep.seeds=[0]"],
    "proxy_mechanism_d128_depth8": [*TINY_PROXY, "model.width=16", "sweep.seeds=[0]"],
    "proxy_mechanism_d128_depth8_fine": [*TINY_PROXY, "model.width=16", "sweep.seeds=[0]"],
    "proxy_mechanism_d128_swiglu": [*TINY_PROXY, "model.width=16", "sweep.seeds=[0]"],
    "proxy_mechanism_d128_swiglu_hi": [*TINY_PROXY, "model.width=16", "sweep.seeds=[0]"],
    "proxy_mechanism_d128_swiglu_source": [*TINY_PROXY, "model.width=16", "sweep.seeds=[0]"],
    "proxy_mechanism_d128_swiglu_fresh": [*TINY_PROXY, "model.width=16", "sweep.seeds=[8]"],
    "proxy_mechanism_d128_fwd": [*TINY_PROXY, "model.width=16", "sweep.seeds=[0]"],
    "proxy_mechanism_d128_beta95": [*TINY_PROXY, "model.width=16", "train.ckpt_every=1", "sweep.seeds=[0]"],
    "proxy_mechanism_d128_beta99": [*TINY_PROXY, "model.width=16", "train.ckpt_every=1", "sweep.seeds=[0]"],
    "proxy_mechanism_beta95": [*TINY_PROXY, "model.width=16", "train.ckpt_every=1", "sweep.seeds=[0]"],
    "proxy_mechanism_d128_early": [
        *TINY_PROXY,
        "model.width=16",
        "train.ckpt_every=1",
        "sweep.seeds=[0]",
        "sweep.branch_step=2",
    ],  # fmt: skip
    # a fixed step, so the tiny run trains branches, among them ones that change Adam's β2
    "proxy_mechanism_d128_adam_branch": [*TINY_BRANCHED, "sweep.seeds=[32]"],
    "proxy_mechanism_adam_branch": [*TINY_BRANCHED, "sweep.seeds=[0]"],
    "proxy_mechanism_seeds16_adam_branch": [*TINY_BRANCHED, "sweep.seeds=[16]"],
    "proxy_mechanism_d128_adam_dose": [*TINY_BRANCHED, "sweep.seeds=[32]"],
    "proxy_mechanism_d128_adam_state": [*TINY_BRANCHED, "sweep.seeds=[32]"],
    # five precisions from init, one of them fp32 but for γ/β in E4M3: each trains tiny beside its twin
    "proxy_mechanism_d128_step_source": [*TINY_PROXY, "model.width=16", "sweep.seeds=[32]"],
    # three of those precisions on fresh seeds
    "proxy_mechanism_d128_step_predict": [*TINY_PROXY, "model.width=16", "sweep.seeds=[56]"],
    "proxy_mechanism_d128_ceil": [*TINY_PROXY, "model.width=16", "sweep.seeds=[32]"],
    "proxy_mechanism_d128_ceil_fresh": [*TINY_PROXY, "model.width=16", "sweep.seeds=[56]"],
    "proxy_mechanism_d128_bf16": [*TINY_PROXY, "model.width=16", "sweep.seeds=[0]"],
    "proxy_mechanism_d128_bf16_seeds": [*TINY_PROXY, "model.width=16", "sweep.seeds=[16]"],
    "proxy_mechanism_d128_rerun": [*TINY_PROXY, "model.width=16", "sweep.seeds=[0]"],
    "proxy_mechanism_d128_step20": [
        *TINY_PROXY,
        "model.width=16",
        "train.ckpt_every=1",
        "sweep.seeds=[0]",
        "sweep.branch_step=2",
    ],  # fmt: skip
    "proxy_mechanism_d128_control": [
        *TINY_PROXY,
        "model.width=16",
        "train.ckpt_every=1",
        "sweep.seeds=[0]",
        "sweep.branch_step=2",
    ],  # fmt: skip
    "proxy_canonical": [*TINY_PROXY, "model.width=16", "train.ckpt_every=1", "train.device=cpu"],
    "proxy_canonical_seeds": [*TINY_PROXY, "model.width=16", "train.ckpt_every=1", "train.device=cpu"],
    "proxy_canonical_interventions": [*TINY_BRANCHED, "train.device=cpu"],
    "proxy_released_search": [*TINY_PROXY, "model.width=16"],
    "proxy_beta95_search": [*TINY_PROXY, "model.width=16"],
    "proxy_released": [*TINY_PROXY, "model.width=16", "train.ckpt_every=1", "sweep.seeds=[0]"],
    "proxy_released_late": [*TINY_PROXY, "model.width=16", "sweep.seeds=[0]"],
    "proxy_released_w512": [*TINY_PROXY, "model.width=16", "train.ckpt_every=1", "sweep.seeds=[0]"],
    "block_size_study": [
        "study.weights=false",
        "study.sigmas=[0.005,0.05]",
        "study.block_sizes=[8,16]",
        "study.n_samples=4096",
    ],  # fmt: skip
}
RUNS = {  # runs each preset plans at full size: (first phase, second phase)
    "smoke": (4, 0),
    "precision_grid": (150, 0),
    "hybrid_fixes": (30, 0),
    "lm_precisions": (243, 0),
    "lm_format_error": (270, 0),  # 5 of lm_precisions' formats × its 9 (C, shape) pairs × fresh seeds 3–8
    "lm_scale_rule": (378, 0),  # bf16 + 3 formats × E8M0 floor and ceil, × the 9 pairs × fresh seeds 9–14
    "lm_grad_sr": (
        216,
        0,
    ),  # E2M1 × floor/ceil × gradient rounding nearest/stochastic, × 9 pairs × seeds 15–20
    "lm_block_scale": (
        378,
        0,
    ),  # bf16 + E2M1 × blocks 8/16/32 × UE4M3 + per-tensor / UE5M3, × 9 pairs × seeds 21–26
    "lm_block_grads": (270, 0),  # bf16 + NVFP4 / UE5M3 at 16, gradients in FP4 or bf16, × 9 pairs × 27–32
    "lm_block_global": (324, 0),  # bf16, NVFP4, UE5M3 alone at 16, UE5M3 + per-tensor at 8/16/32, × 9 × 33–38
    "lm_block_e8m0": (270, 0),  # bf16, NVFP4, E2M1 under E8M0 at 8/16/32, × 9 pairs × seeds 39–44
    "lm_block_ceil": (378, 0),  # bf16, E2M1 under E8M0 floor and ceil at 8/16/32, × 9 pairs × seeds 45–50
    "lm_block_grads_fresh": (216, 0),  # bf16 and three FP4 families with bf16 gradients, × 9 × seeds 51–56
    "lm_grad_sr_recipes": (324, 0),  # bf16, NVFP4 and MXFP4 ceil, gradients nearest or SR, × 9 × seeds 57–62
    "lm_grad_sr_forward": (216, 0),  # bf16, NVFP4 and MXFP4 ceil or floor forward, all SR, × 9 × 75–80
    "lm_grad_sr_blocks": (270, 0),  # bf16, NVFP4 and the MXFP4 recipe at 8/16/32, all SR, × 9 × 81–86
    "lm_grad_sr_equiv": (216, 0),  # bf16, NVFP4 and the MXFP4 recipe at 32, all SR, × 9 × seeds 87–94
    "lm_spikes_pilot": (1, 0),  # bf16 at d48 L2, C = 2e12, seed 0; × the 6 LRs of hydra.sweeper.params
    "lm_spikes": (18, 0),  # bf16, MXFP8 E5M2, E4M3 at d48 L2, C = 2e12, seeds 95–100; × 3 LRs (hydra)
    "lm_spikes_fixes": (32, 0),  # bf16, full MXFP8 E4M3 and the study's two fixes, seeds 101–108, lr 1e-2
    "lm_spikes_clamp": (30, 0),  # bf16, full MXFP8 E4M3 floor / ceil and the two fixes, seeds 109–114, lr 0.1
    "lm_spikes_ceil": (30, 0),  # bf16, MXFP8 E4M3 and E5M2, floor and ceil, seeds 115–120; × 2 LRs (hydra)
    "lm_spikes_fwd_ceil": (32, 0),  # bf16, forward-only E4M3 floor / ceil, full E4M3 ceil, seeds 121–128
    "lm_spikes_e5m2_grads": (40, 0),  # full E4M3 ceil; E5M2 in both / dgrad / wgrad dY; SR; seeds 137–144
    "lm_spikes_e5m2_head": (36, 0),  # full E4M3 / E5M2 gradients, all / head in fp32 / head only; 145–150
    "lm_spikes_e5m2_lr": (18, 0),  # full E4M3, E5M2 gradients nearest / SR, seeds 151–156; × 2 LRs (hydra)
    "lm_spikes_e5m2_gamma": (16, 0),  # full E4M3, E5M2 gradients, every norm at 1e-3 × the LR, 157–164
    "lm_spikes_e5m2_roles": (40, 0),  # bf16, E4M3 / E5M2 ceil, the two operand × gradient swaps, 129–136
    "lm_grad_sr_gceil": (270, 0),  # bf16, MXFP4 floor, gradients floor or ceil, nearest or SR, × 9 × 69–74
    "lm_grad_sr_clamp": (378, 0),  # bf16, NVFP4 and MXFP4 floor at 32/8, gradients nearest or SR, × 9 × 63–68
    "paper_llm": (2375, 0),
    "proxy_lr_sweep": (4, 0),  # × 12 combinations of hydra.sweeper.params (expanded by the plugin)
    "proxy_interventions": (2, 8),
    "proxy_mechanism": (16, 0),  # branches are planned from the parents' records (sweep.branch_at)
    "proxy_canonical": (3, 0),
    "proxy_canonical_interventions": (3, 0),  # branches are planned from the parents' records
    "proxy_canonical_seeds": (3, 0),  # γ in E4M3 on seeds 1338–1340, each beside its fp32 twin
    "proxy_late_search": (2, 0),  # × the norm-LR multipliers of hydra.sweeper.params
    "proxy_late_drift": (4, 0),
    "proxy_late_lr": (4, 0),
    "proxy_late_norm10": (2, 0),
    "proxy_late_wide": (2, 0),
    "proxy_mechanism_lr3": (16, 0),  # phase 1 only
    "proxy_mechanism_lr5": (16, 0),  # phase 1 only
    "proxy_mechanism_lr_fine": (8, 0),  # γ in E4M3 only, × the 2 LRs of hydra.sweeper.params
    "proxy_mechanism_seeds": (16, 0),  # phase 1 only
    "proxy_mechanism_seeds16": (32, 0),  # phase 1 only
    "proxy_mechanism_seeds16_source": (32, 0),  # the clamp alone and bf16 activations, from init
    "proxy_mechanism_d128": (32, 0),  # branches are planned from the parents' records
    "proxy_mechanism_d128_b1024": (16, 0),  # phase 1 only, 4× the batch
    "proxy_mechanism_d128_b64": (32, 0),  # phase 1 only, a quarter of the batch, 16 seeds
    "proxy_mechanism_d128_seeds": (32, 0),  # phase 1 only, fresh seeds 16–31
    "proxy_mechanism_d128_seeds32": (16, 0),  # phase 1 only, fresh seeds 32–39
    "proxy_mechanism_d128_seeds40": (32, 0),  # phase 1 only, fresh seeds 40–55
    "proxy_mechanism_d128_lr": (16, 0),  # seeds 0–7, × the 3 LRs of hydra.sweeper.params
    "proxy_mechanism_d128_lr_fine": (16, 0),  # seeds 0–7, × the 2 LRs of hydra.sweeper.params
    "proxy_mechanism_d128_depth8": (16, 0),  # depth 8, seeds 0–7, × the 3 LRs of hydra.sweeper.params
    "proxy_mechanism_d128_depth8_fine": (16, 0),  # depth 8, seeds 0–7, one LR
    "proxy_mechanism_d128_swiglu": (16, 0),  # SwiGLU, seeds 0–7, × the 4 LRs of hydra.sweeper.params
    "proxy_mechanism_d128_swiglu_hi": (16, 0),  # SwiGLU, seeds 0–7, × 2 higher LRs
    "proxy_mechanism_d128_swiglu_source": (24, 0),  # seeds 0–7 × 3 precisions, × swiglu_hi's 2 LRs
    "proxy_mechanism_d128_swiglu_fresh": (24, 0),  # fresh seeds 8–15 × 3 precisions, × the 2 LRs
    "proxy_mechanism_d128_fwd": (16, 0),  # forward-only MX on seeds 0–15, one LR
    "proxy_mechanism_d128_beta95": (32, 0),  # Adam β2 0.95; branches planned from the parents' records
    "proxy_mechanism_d128_beta99": (32, 0),  # Adam β2 0.99; branches planned from the parents' records
    "proxy_mechanism_beta95": (16, 0),  # proxy_mechanism at Adam β2 0.95, phase 1 only
    "proxy_mechanism_d128_early": (6, 30),  # a fixed branch step: every parent × 5 interventions
    "proxy_mechanism_d128_adam_branch": (9, 0),  # the 9 parents; branches planned from their records
    "proxy_mechanism_adam_branch": (8, 0),  # d256 seeds 0–7; branches planned from their records
    "proxy_mechanism_seeds16_adam_branch": (6, 0),  # the 6 d256 parents of seeds 16–31; branches planned
    "proxy_mechanism_d128_adam_dose": (9, 0),  # the same 9 parents; branches planned from their records
    "proxy_mechanism_d128_adam_state": (14, 0),  # the 9 parents and 5 seeds that never spiked
    "proxy_mechanism_d128_step_source": (70, 0),  # those 14 seeds from init × 5 precisions, no branches
    "proxy_mechanism_d128_step_predict": (48, 0),  # fresh seeds 56–71 × 3 of those precisions
    "proxy_mechanism_d128_ceil": (28, 0),  # step_source's 14 seeds × γ in E4M3 under the ceil rule, ×2
    "proxy_mechanism_d128_ceil_fresh": (32, 0),  # the same on step_predict's fresh seeds 56–71
    "proxy_mechanism_d128_rerun": (16, 0),  # d128's γ-in-E4M3 runs retrained here, no branches
    "proxy_mechanism_d128_bf16_seeds": (24, 0),  # the same on seeds 16–39
    "proxy_mechanism_d128_bf16": (16, 0),  # γ/β in bf16 on proxy_mechanism_d128's seeds, no branches
    "proxy_mechanism_d128_step20": (6, 12),  # every parent × 2 interventions
    "proxy_mechanism_d128_control": (12, 12),  # both variants' parents × fp32
    "proxy_released_search": (4, 0),  # × the 5 LRs of hydra.sweeper.params
    "proxy_beta95_search": (4, 0),  # × the 4 LRs of hydra.sweeper.params
    "proxy_released": (20, 0),  # branches are planned from the parents' records
    "proxy_released_late": (2, 0),
    "proxy_released_w512": (2, 0),
}


def test_every_preset_has_a_tiny_run():
    assert PRESETS and set(PRESETS) == set(TINY), "add the new preset's tiny overrides to TINY"
    for name, base in VARIANTS.items():  # only value changes on top of their base preset
        text = (REPO / "conf" / "experiment" / f"{name}.yaml").read_text()
        assert f"defaults:\n  - {base}\n  - _self_\n" in text, name


@pytest.mark.parametrize("name", PRESETS)
def test_preset_composes_and_expands(name, tmp_path):
    with initialize_config_dir(config_dir=str(REPO / "conf"), version_base="1.3"):
        cfg = compose("config", overrides=[f"experiment={name}", *LOGGER], return_hydra_config=True)
    assert cfg.hydra.sweeper._target_.endswith("MxSweeper")
    if cfg.get("study") is not None:  # a study, not training runs: its arguments must be run_study's
        from analysis.blocksize import run_study

        assert cfg.study.name in launch.STUDIES
        assert set(cfg.study) - {"name"} <= set(inspect.signature(run_study).parameters)
        return
    base = to_run_config(cfg)
    with initialize_config_dir(config_dir=str(REPO / "conf"), version_base="1.3"):
        sweep, budget = sweep_settings(cfg)  # inside: precision options compose through Hydra
    assert sweep.name == name
    runs = expand(base, sweep, budget, tmp_path)
    branches = branch(runs, sweep, tmp_path) if sweep.branches else []
    assert (len(runs), len(branches)) == RUNS[name]
    assert len({r.run_id for r in runs + branches}) == len(runs) + len(branches)


VARIANTS = {
    "lm_format_error": "lm_precisions",
    "lm_scale_rule": "lm_format_error",
    "lm_grad_sr": "lm_scale_rule",
    "lm_block_scale": "lm_format_error",
    "lm_block_grads": "lm_format_error",
    "lm_block_global": "lm_format_error",
    "lm_block_e8m0": "lm_format_error",
    "lm_block_ceil": "lm_format_error",
    "lm_block_grads_fresh": "lm_format_error",
    "lm_grad_sr_recipes": "lm_format_error",
    "lm_grad_sr_clamp": "lm_format_error",
    "lm_grad_sr_gceil": "lm_format_error",
    "lm_grad_sr_forward": "lm_format_error",
    "lm_grad_sr_blocks": "lm_format_error",
    "lm_grad_sr_equiv": "lm_format_error",
    "lm_spikes_pilot": "lm_precisions",
    "lm_spikes": "lm_spikes_pilot",
    "lm_spikes_fixes": "lm_spikes",
    "lm_spikes_clamp": "lm_spikes",
    "lm_spikes_ceil": "lm_spikes",
    "lm_spikes_fwd_ceil": "lm_spikes",
    "lm_spikes_e5m2_roles": "lm_spikes",
    "lm_spikes_e5m2_grads": "lm_spikes",
    "lm_spikes_e5m2_head": "lm_spikes",
    "lm_spikes_e5m2_lr": "lm_spikes",
    "lm_spikes_e5m2_gamma": "lm_spikes",
    "proxy_late_drift": "proxy_late_search",
    "proxy_late_lr": "proxy_late_search",
    "proxy_late_norm10": "proxy_late_search",
    "proxy_late_wide": "proxy_late_search",
    "proxy_mechanism_lr3": "proxy_mechanism",
    "proxy_mechanism_lr5": "proxy_mechanism",
    "proxy_mechanism_lr_fine": "proxy_mechanism",
    "proxy_mechanism_seeds": "proxy_mechanism",
    "proxy_mechanism_seeds16": "proxy_mechanism",
    "proxy_mechanism_seeds16_source": "proxy_mechanism_seeds16",
    "proxy_mechanism_d128": "proxy_mechanism",
    "proxy_mechanism_d128_early": "proxy_mechanism_d128",
    "proxy_mechanism_d128_b1024": "proxy_mechanism_d128",
    "proxy_mechanism_d128_b64": "proxy_mechanism_d128",
    "proxy_mechanism_d128_seeds": "proxy_mechanism_d128",
    "proxy_mechanism_d128_seeds32": "proxy_mechanism_d128_seeds",
    "proxy_mechanism_d128_seeds40": "proxy_mechanism_d128_seeds",
    "proxy_mechanism_d128_lr": "proxy_mechanism_d128",
    "proxy_mechanism_d128_lr_fine": "proxy_mechanism_d128_lr",
    "proxy_mechanism_d128_depth8": "proxy_mechanism_d128_lr",
    "proxy_mechanism_d128_depth8_fine": "proxy_mechanism_d128_depth8",
    "proxy_mechanism_d128_swiglu": "proxy_mechanism_d128_lr",
    "proxy_mechanism_d128_swiglu_hi": "proxy_mechanism_d128_swiglu",
    "proxy_mechanism_d128_swiglu_source": "proxy_mechanism_d128_swiglu_hi",
    "proxy_mechanism_d128_swiglu_fresh": "proxy_mechanism_d128_swiglu_source",
    "proxy_mechanism_d128_fwd": "proxy_mechanism_d128_lr",
    "proxy_mechanism_d128_beta95": "proxy_mechanism_d128",
    "proxy_mechanism_d128_beta99": "proxy_mechanism_d128_beta95",
    "proxy_mechanism_beta95": "proxy_mechanism",
    "proxy_mechanism_adam_branch": "proxy_mechanism_d128_adam_branch",
    "proxy_mechanism_seeds16_adam_branch": "proxy_mechanism_adam_branch",
    "proxy_mechanism_d128_adam_dose": "proxy_mechanism_d128_adam_branch",
    "proxy_mechanism_d128_adam_state": "proxy_mechanism_d128_adam_branch",
    "proxy_mechanism_d128_step_predict": "proxy_mechanism_d128_step_source",
    "proxy_mechanism_d128_ceil": "proxy_mechanism_d128_step_source",
    "proxy_mechanism_d128_ceil_fresh": "proxy_mechanism_d128_ceil",
    "proxy_mechanism_d128_bf16": "proxy_mechanism_d128",
    "proxy_mechanism_d128_bf16_seeds": "proxy_mechanism_d128_bf16",
    "proxy_mechanism_d128_rerun": "proxy_mechanism_d128",
    "proxy_canonical_seeds": "proxy_canonical",
    "proxy_canonical_interventions": "proxy_canonical",
    "proxy_mechanism_d128_step20": "proxy_mechanism_d128_early",
    "proxy_mechanism_d128_control": "proxy_mechanism_d128_step20",
    "proxy_released_search": "proxy_mechanism",
    "proxy_beta95_search": "proxy_mechanism_d128_beta95",
    "proxy_released": "proxy_mechanism_d128",
    "proxy_released_late": "proxy_late_search",
    "proxy_released_w512": "proxy_released_late",
}
"""Presets that only change values of a base preset (their defaults): they compose and expand below and
ran at full size for docs/results.md; running each tiny again adds no code path, only suite time."""


@pytest.mark.parametrize("name", sorted(set(PRESETS) - set(VARIANTS)))
def test_preset_runs_on_a_tiny_budget(name, tmp_path):
    out = tmp_path / name
    if name == "block_size_study":
        args = [f"experiment={name}", f"out_dir={out}", *TINY[name]]
    else:
        args = ["-m", f"experiment={name}", f"hydra.sweep.dir={out}", "sweep.progress=false", *TINY[name]]
    r = launching.launch(*args, *LOGGER)
    assert r.returncode == 0, r.stderr[-3000:]
    if name == "block_size_study":
        assert json.loads((out / "summary.json").read_text())["status"] == "done"
        return
    records = [json.loads(p.read_text()) for p in out.glob("*/summary.json")]
    first, second = RUNS[name]
    if name == "proxy_mechanism":
        first, second = 2, _check_spike_branches(out)  # one seed (sweep.seeds=[0]) × 2 precisions
    expected = {
        "precision_grid": 25,
        "hybrid_fixes": 5,
        "paper_llm": 4,  # narrowed to 2 × 2 from the command line
        "proxy_lr_sweep": 16,
        "proxy_late_search": 1,  # one seed × one norm-LR multiplier
        "proxy_late_drift": 1,
        "proxy_late_lr": 1,
        "proxy_late_norm10": 1,
        "proxy_late_wide": 1,
        "lm_precisions": 9,
        "proxy_mechanism_d128_adam_branch": 5,  # one parent and its 4 branches at step 2
        "proxy_mechanism_d128_step_source": 5,  # one seed × the 5 precisions
    }.get(name)
    assert len(records) == (expected or first + second)
    assert {s["status"] for s in records} <= {"done", "diverged"}, [s.get("error") for s in records]
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["counts"]["launched"] == len(records)
    if name == "proxy_mechanism_d128_adam_branch":  # the β2 branches trained with their own betas
        import yaml

        betas = {p.parent.name.split("_")[-2]: yaml.safe_load(p.read_text())["train"]["betas"]
                 for p in out.glob("*/config.yaml")}  # fmt: skip
        assert {k: v for k, v in betas.items() if v} == {"95@2": [0.9, 0.95], "99@2": [0.9, 0.99]}


def _check_spike_branches(out) -> int:
    """proxy_mechanism's second phase: every parent with a spike has its five branches at each branch
    point, from the checkpoints at 0.4 and 0.75 × the parent's first-spike step (one set where both
    round to the same checkpoint); returns the number of branches."""
    import yaml

    from records import spike_branch_step

    parents, branches = {}, []
    for path in out.glob("*/config.yaml"):
        cfg = yaml.safe_load(path.read_text())
        summary = json.loads((path.parent / "summary.json").read_text())
        if cfg["train"]["branch_from"] is None:
            parents[path.parent.name] = summary
        else:
            branches.append((cfg, summary))
    expected = {n: {spike_branch_step(s, f, 2) for f in (0.4, 0.75)} - {None} for n, s in parents.items()}
    assert any(expected.values()), f"no parent spiked: {parents}"
    for cfg, summary in branches:
        parent = cfg["train"]["branch_from"].rstrip("/").rsplit("/", 1)[-1]
        assert cfg["train"]["branch_step"] in expected[parent]
        assert cfg["train"]["twin_every"] == 0 and summary["status"] in ("done", "diverged")
    assert len(branches) == 5 * sum(len(k) for k in expected.values())
    return len(branches)


# -- config groups: every option composes, validates, and trains (issue 12) ----------------------------
PRECISIONS = sorted(p.stem for p in (REPO / "conf" / "precision").glob("*.yaml"))


def test_the_precision_group_has_the_studies_options():
    formats = {"mxfp8", "mxfp8_e4m3", "mxfp8_e5m2", "mxfp6_e2m3", "mxfp6_e3m2", "mxfp4", "nvfp4",
               "nvfp4_ue5m3", "bf16", "fp32"}  # fmt: skip
    study = {"e4m3w_bf16a", "e5m2w_bf16a", "mxfp8_fwd", "mx_ln_e4m3", "mx_ln_bf16", "mx_ln_none"}
    assert formats | study <= set(PRECISIONS)


def _options(group: str) -> list[str]:
    return sorted(p.stem for p in (REPO / "conf" / group).glob("*.yaml"))


TINY_LM_RUN = ["model.depth=1", "model.d_model=32", "model.n_heads=2", "data.seq_len=16", "train.steps=2",
               "train.batch_size=2", "train.eval_every=0", "train.eval_batches=1"]  # fmt: skip
TINY_PROXY_RUN = ["model.width=32", "model.depth=1", *TINY_PROXY]
GROUP_OPTIONS = [  # (group, option, the task it runs under)
    *[("precision", o, "proxy") for o in _options("precision")],
    *[("model", o, "lm" if o.startswith("lm") else "proxy") for o in _options("model")],
    *[("data", o, "lm") for o in _options("data")],
    *[("optim", o, t) for o in _options("optim") for t in ("lm", "proxy")],
    *[("task", o, o) for o in _options("task")],
]


@pytest.mark.parametrize(("group", "option", "task"), GROUP_OPTIONS)
def test_every_option_of_every_group_composes_and_trains(group, option, task, tmp_path):
    """``<group>=<option>`` composes into a valid, typed RunConfig (model and data typed by the task's
    schemas), and a tiny run trains with it in-process (the loop, the quantizer and the record)."""
    from models import CONFIGS
    from train.config import RunConfig
    from train.hooks import default_hooks
    from train.loop import train
    from train.tasks import make_task

    tiny = TINY_LM_RUN if task == "lm" else TINY_PROXY_RUN
    extra = []
    if group == "data" and option == "tokens":  # a tiny token file stands in for FineWeb-Edu
        import numpy as np

        ids = np.random.default_rng(0).integers(0, 256, 4096).astype(np.uint16)
        ids.tofile(tmp_path / "train.bin")
        ids.tofile(tmp_path / "val.bin")
        extra = [
            f"data.path={tmp_path / 'train.bin'}",
            f"data.val_path={tmp_path / 'val.bin'}",
            "data.vocab_size=256",
        ]
    if task == "lm" and group != "data":
        extra.append("data=synthetic")  # litmix needs its prepared corpus (data=litmix below)
    overrides = [f"task={task}", f"{group}={option}", *LOGGER, f"out_dir={tmp_path / 'run'}", *tiny, *extra]
    with initialize_config_dir(config_dir=str(REPO / "conf"), version_base="1.3"):
        cfg = compose("config", overrides=overrides, return_hydra_config=True)
    assert cfg.hydra.runtime.choices[group] == option if group != "task" else cfg.task == option
    run = to_run_config(cfg)
    assert isinstance(run, RunConfig) and type(run.model) is CONFIGS[run.task]
    assert (run.data is None) == (run.task == "proxy")
    if group == "data" and option == "litmix":
        from corpora import default_data_dir, is_prepared

        if not is_prepared(default_data_dir() / "litmix"):  # its preparation is tested in test_data.py
            pytest.skip("litmix is not prepared here (python -m corpora prepare); composed and typed")
    summary = train(run, make_task(run), default_hooks(run))
    assert summary["status"] == "done" and summary["step"] == 2


def test_a_model_of_another_task_or_an_unknown_field_fails_while_composing():
    from hydra.errors import ConfigCompositionException

    with initialize_config_dir(config_dir=str(REPO / "conf"), version_base="1.3"):
        with pytest.raises(ConfigCompositionException):  # the proxy's schema has no d_model
            compose("config", overrides=["task=proxy", "model.d_model=64", *LOGGER])
        with pytest.raises(ValueError, match="needs a LMConfig"):
            to_run_config(compose("config", overrides=["task=lm", "model=proxy", *LOGGER]))


def test_precision_options_mean_what_they_say():
    with initialize_config_dir(config_dir=str(REPO / "conf"), version_base="1.3"):

        def precision(*overrides):
            return to_run_config(compose("config", overrides=[*overrides, *LOGGER])).precision

        assert precision("precision=mxfp8") == precision("precision=mxfp8_e4m3")  # an alias
        assert precision("precision=mxfp8").label() == "mxfp8_e4m3"
        hybrid = precision("precision=e4m3w_bf16a")
        assert (hybrid.w, hybrid.a, hybrid.policy().name_of("g_dgrad")) == ("fp8_e4m3", "bf16", "bf16")
        assert not precision("precision=mxfp8_fwd").quantize_backward
        assert precision("precision=mx_ln_e4m3").norm_affine == "fp8_e4m3"
        assert precision("precision=mx_ln_none").norm_affine == "none"
        assert precision("precision=nvfp4", "precision.a=bf16").a == "bf16"  # an option, then a field
        short, full = precision("precision.w=mxfp8"), precision("precision.w=fp8_e4m3")
        assert short.policy().spec("w") == full.policy().spec("w")


def test_branch_parents_limits_the_second_phase_to_those_precisions(tmp_path):
    """sweep.branch_parents: only the named first-phase precisions are branched (the interventions act
    on γ in E4M3; a γ-unquantized parent's branches answer nothing)."""
    over = ["experiment=proxy_mechanism", "sweep.seeds=[0,1]", "sweep.branch_at=[]", "sweep.branch_step=100"]
    plans = {}
    for name, extra in (("every", []), ("only", ["sweep.branch_parents=[mx_ln_e4m3]"])):
        with initialize_config_dir(config_dir=str(REPO / "conf"), version_base="1.3"):
            cfg = compose("config", overrides=[*over, *extra, *LOGGER])
            sweep, budget = sweep_settings(cfg)
        runs = expand(to_run_config(cfg), sweep, budget, tmp_path / name)
        branches = branch(runs, sweep, tmp_path / name)
        plans[name] = {b.parent.coords["precision"] for b in branches}, len(branches)
    assert plans["every"] == ({"mx_ln_e4m3", "mx_ln_none"}, 20) and plans["only"] == ({"mx_ln_e4m3"}, 10)


def test_a_branch_may_change_the_optimizer_and_its_job_composes_the_same_run(tmp_path):
    """A ``train`` map in a sweep.branches entry: the branch's run trains with those betas from the
    branch point (its parent's keep theirs), and the overrides its job gets compose that same run."""
    over = [
        "experiment=proxy_mechanism", "sweep.seeds=[0]", "sweep.branch_at=[]", "sweep.branch_step=100",
        "sweep.branch_parents=[mx_ln_e4m3]", "sweep.branches=[{name:adam_b2_95,train:{betas:[0.9,0.95]}}]",
        "sweep.branch_ckpt_every=0",  # the branch checkpoints only at its end; its parent every 100 steps
    ]  # fmt: skip
    with initialize_config_dir(config_dir=str(REPO / "conf"), version_base="1.3"):
        cfg = compose("config", overrides=[*over, *LOGGER])
        sweep, budget = sweep_settings(cfg)
        runs = expand(to_run_config(cfg), sweep, budget, tmp_path)
        (b,) = branch(runs, sweep, tmp_path)
        assert b.run.train.betas == [0.9, 0.95] and b.parent.run.train.betas is None
        assert (b.run.train.ckpt_every, b.parent.run.train.ckpt_every) == (0, 100)
        assert (
            b.run.precision == b.parent.run.precision and b.coords["precision"] == "mx_ln_e4m3→adam_b2_95@100"
        )
        assert "train.betas=[0.9,0.95]" in b.overrides
        job = to_run_config(compose("config", overrides=[*over, *b.overrides, *LOGGER]))
    assert run_id(job) == b.run_id


def _planned(preset: str, tmp_path):
    """The runs ``experiment=<preset>`` plans at full size."""
    with initialize_config_dir(config_dir=str(REPO / "conf"), version_base="1.3"):
        cfg = compose("config", overrides=[f"experiment={preset}", *LOGGER], return_hydra_config=True)
        sweep, budget = sweep_settings(cfg)
    return expand(to_run_config(cfg), sweep, budget, tmp_path)


def _role_specs(preset: str, tmp_path, key, roles=ROLES) -> dict[str, set]:
    """label → {``key(spec)`` for each of ``roles``} of the runs ``experiment=<preset>`` plans: a
    one-element set where every role trains alike."""
    seen: dict[str, set] = {}
    for r in _planned(preset, tmp_path):
        policy = r.run.precision.policy()
        seen.setdefault(r.run.logger.label, set()).update(key(policy.spec(role)) for role in roles)
    return seen


def _geometry(s) -> tuple:
    """A spec's block geometry: element format, block size, scale format and rule, per-tensor scale."""
    return s.elem.name, s.block_size, s.scale.name, s.scale_rule.value, s.global_scale


def test_lm_block_scale_trains_the_geometry_each_name_says(tmp_path):
    """3.5's names are its claims: blocks of 8/16/32 under UE4M3 with NVFP4's per-tensor scale, and under
    UE5M3 alone, in every role a step quantizes (the gradients above all)."""
    seen = {}
    for r in _planned("lm_block_scale", tmp_path):
        spec = r.run.precision.policy().spec("g_wgrad")
        seen[r.run.logger.label] = (spec.elem.name, spec.block_size, spec.scale.name, spec.global_scale)
    assert seen == {
        "bf16": ("bf16", None, "e8m0", False),
        **{f"nvfp4_bs{b}": ("fp4_e2m1", b, "ue4m3", True) for b in (8, 32)},
        "nvfp4": ("fp4_e2m1", 16, "ue4m3", True),
        **{f"ue5m3_bs{b}": ("fp4_e2m1", b, "ue5m3", False) for b in (8, 16, 32)},
    }


def test_lm_block_global_puts_ue5m3_under_a_per_tensor_scale_in_every_role(tmp_path):
    """3.7's `ue5m3_global` runs quantize every role (the gradients above all) in E2M1 under UE5M3 block
    scales and NVFP4's per-tensor scale, at the block size the name says; its references are as in 3.5."""
    assert _role_specs("lm_block_global", tmp_path, _geometry) == {
        "bf16": {("bf16", None, "e8m0", "floor", False)},
        "nvfp4": {("fp4_e2m1", 16, "ue4m3", "floor", True)},
        "ue5m3_bs16": {("fp4_e2m1", 16, "ue5m3", "floor", False)},
        **{f"ue5m3_global_bs{b}": {("fp4_e2m1", b, "ue5m3", "floor", True)} for b in (8, 16, 32)},
    }


def test_lm_block_e8m0_trains_mxfp4_at_each_block_size_under_the_floor_rule(tmp_path):
    """3.8's `mxfp4_e2m1*` runs quantize every role in E2M1 under E8M0 block scales (OCP's floor rule)
    at the block size the name says; NVFP4 is the float-scale reference."""
    seen = _role_specs("lm_block_e8m0", tmp_path, _geometry)
    assert {k: v for k, v in seen.items() if k.startswith("mxfp4")} == {
        "mxfp4_e2m1_bs8": {("fp4_e2m1", 8, "e8m0", "floor", False)},
        "mxfp4_e2m1_bs16": {("fp4_e2m1", 16, "e8m0", "floor", False)},
        "mxfp4_e2m1": {("fp4_e2m1", 32, "e8m0", "floor", False)},
    }
    assert set(seen) == {"bf16", "nvfp4", "mxfp4_e2m1_bs8", "mxfp4_e2m1_bs16", "mxfp4_e2m1"}


def test_lm_block_ceil_trains_mxfp4_at_each_block_size_under_both_scale_rules(tmp_path):
    """3.9's `mxfp4_e2m1*` runs quantize every role in E2M1 under E8M0 block scales at the block size the
    name says, under the ceil rule where the name says so and OCP's floor rule otherwise."""
    seen = _role_specs("lm_block_ceil", tmp_path, _geometry)
    expected = {
        f"mxfp4_e2m1{'_ceil' if rule == 'ceil' else ''}{'' if b == 32 else f'_bs{b}'}": {
            ("fp4_e2m1", b, "e8m0", rule, False)
        }
        for rule in ("floor", "ceil")
        for b in (8, 16, 32)
    }
    assert {k: v for k, v in seen.items() if k != "bf16"} == expected
    assert set(seen) == {"bf16", *expected}


_NVFP4 = ("fp4_e2m1", 16, "ue4m3", "floor", True)
_CEIL, _CEIL16, _CEIL8, _FLOOR, _FLOOR16, _FLOOR8 = (
    ("fp4_e2m1", b, "e8m0", rule, False) for rule in ("ceil", "floor") for b in (32, 16, 8)
)


@pytest.mark.parametrize(
    ("preset", "geometry", "grads"),
    [
        # 3.11: NVFP4 and E2M1 under E8M0 ceil at the block size the name says
        ("lm_grad_sr_recipes", {"nvfp4": _NVFP4, "nvfp4_sr": _NVFP4, "mxfp4_e2m1_ceil_sr": _CEIL,
                                "mxfp4_e2m1_ceil_bs8": _CEIL8, "mxfp4_e2m1_ceil_bs8_sr": _CEIL8}, {}),
        # 3.12: NVFP4 and E2M1 under OCP's floor rule at the block size the name says
        ("lm_grad_sr_clamp", {"nvfp4": _NVFP4, "nvfp4_sr": _NVFP4, "mxfp4_e2m1": _FLOOR,
                              "mxfp4_e2m1_sr": _FLOOR, "mxfp4_e2m1_bs8": _FLOOR8,
                              "mxfp4_e2m1_bs8_sr": _FLOOR8}, {}),
        # 3.13: floor everywhere, or floor on weights and activations and ceil on the gradients
        ("lm_grad_sr_gceil", dict.fromkeys(("mxfp4_e2m1", "mxfp4_e2m1_sr", "mxfp4_e2m1_gceil",
                                            "mxfp4_e2m1_gceil_sr"), _FLOOR),
         dict.fromkeys(("mxfp4_e2m1_gceil", "mxfp4_e2m1_gceil_sr"), _CEIL)),
        # 3.14: every run's gradients stochastic, MXFP4's under ceil, its forward under ceil or floor
        ("lm_grad_sr_forward", {"nvfp4_sr": _NVFP4, "mxfp4_e2m1_ceil_sr": _CEIL,
                                "mxfp4_e2m1_gceil_sr": _FLOOR}, {"mxfp4_e2m1_gceil_sr": _CEIL}),
        # 3.15: the recipe (floor forward, ceil SR gradients) at 8/16/32 beside NVFP4 with SR gradients
        ("lm_grad_sr_blocks", {"nvfp4_sr": _NVFP4, "mxfp4_e2m1_gceil_sr": _FLOOR,
                               "mxfp4_e2m1_bs16_gceil_sr": _FLOOR16, "mxfp4_e2m1_bs8_gceil_sr": _FLOOR8},
         {"mxfp4_e2m1_gceil_sr": _CEIL, "mxfp4_e2m1_bs16_gceil_sr": _CEIL16,
          "mxfp4_e2m1_bs8_gceil_sr": _CEIL8}),
        # 3.16: the recipe at 32 beside NVFP4, both with SR gradients
        ("lm_grad_sr_equiv", {"nvfp4_sr": _NVFP4, "mxfp4_e2m1_gceil_sr": _FLOOR},
         {"mxfp4_e2m1_gceil_sr": _CEIL}),
    ],
)  # fmt: skip
def test_sr_presets_round_only_the_gradients_stochastically(tmp_path, preset, geometry, grads):
    """3.11–3.16's `_sr` runs round the two gradient roles stochastically and every other role to
    nearest, each role under the geometry its name says (the gradients' as the forward's, but where
    ``grads`` names another)."""
    fwd_roles, grad_roles = ("w", "a", "w_bwd", "a_bwd"), ("g_dgrad", "g_wgrad")
    seen = {  # one expansion of the preset per group of roles: (geometry, rounding) of each role
        which: _role_specs(preset, tmp_path, lambda s: (_geometry(s), s.rounding.value), roles)
        for which, roles in (("fwd", fwd_roles), ("grads", grad_roles))
    }
    trained = {w: {k: {g for g, _ in v} for k, v in by.items()} for w, by in seen.items()}
    rounding = {w: {k: {r for _, r in v} for k, v in by.items()} for w, by in seen.items()}
    assert {k: v for k, v in trained["fwd"].items() if k != "bf16"} == {k: {g} for k, g in geometry.items()}
    assert {k: v for k, v in trained["grads"].items() if k != "bf16"} == {
        k: {grads.get(k, g)} for k, g in geometry.items()
    }
    assert all(rounding["fwd"][k] == {"even"} for k in geometry)
    assert {k: rounding["grads"][k] for k in geometry} == {
        k: {"stochastic" if k.endswith("_sr") else "even"} for k in geometry
    }


def test_lm_block_grads_keeps_only_the_gradients_out_of_fp4(tmp_path):
    """3.6's `_bf16g` runs hold the incoming gradient in bf16 in both backward GEMMs and nothing else:
    weights and saved activations stay FP4 in the backward GEMMs, under their family's block scale."""
    seen = {}
    for r in _planned("lm_block_grads", tmp_path):
        policy = r.run.precision.policy()
        seen[r.run.logger.label] = tuple(
            (policy.spec(role).elem.name, policy.spec(role).scale.name, policy.spec(role).global_scale)
            for role in ("w", "a_bwd", "g_dgrad", "g_wgrad")
        )
    fp4 = {"nvfp4": ("fp4_e2m1", "ue4m3", True), "ue5m3_bs16": ("fp4_e2m1", "ue5m3", False)}
    for name, spec in fp4.items():
        assert seen[name] == (spec,) * 4
        assert seen[f"{name}_bf16g"][:2] == (spec,) * 2
        assert [s[0] for s in seen[f"{name}_bf16g"][2:]] == ["bf16", "bf16"]
    assert set(seen) == {"bf16", *fp4, *(f"{n}_bf16g" for n in fp4)}


def test_lm_block_grads_fresh_keeps_the_gradients_of_each_family_in_bf16(tmp_path):
    """3.10's runs are 3.6's `_bf16g` pair again, plus UE5M3 under NVFP4's per-tensor scale: weights and
    saved activations in FP4 under the family's block scale, the incoming gradient in bf16."""
    weights = _role_specs("lm_block_grads_fresh", tmp_path, _geometry, ("w", "a", "w_bwd", "a_bwd"))
    grads = _role_specs("lm_block_grads_fresh", tmp_path, lambda s: s.elem.name, ("g_dgrad", "g_wgrad"))
    families = {
        "nvfp4_bf16g": ("fp4_e2m1", 16, "ue4m3", "floor", True),
        "ue5m3_bs16_bf16g": ("fp4_e2m1", 16, "ue5m3", "floor", False),
        "ue5m3_global_bs16_bf16g": ("fp4_e2m1", 16, "ue5m3", "floor", True),
    }
    assert {k: v for k, v in weights.items() if k != "bf16"} == {name: {g} for name, g in families.items()}
    assert grads == dict.fromkeys(["bf16", *families], {"bf16"})


def test_the_ceil_spike_presets_train_the_rule_each_name_says_in_the_roles_it_says(tmp_path):
    """3.17 and 3.18 set E8M0's ceil rule against floor: `_ceil` names round every role they quantize
    with ceil; forward-only MX quantizes the forward roles alone, under the rule its name says."""

    def rule(s):
        return s.elem.name, s.scale_rule.value

    hp = {("fp32", "floor")}  # forward-only MX keeps both backward GEMMs in high precision
    seen = _role_specs("lm_spikes_fwd_ceil", tmp_path, rule, roles=("w", "a"))
    back = _role_specs("lm_spikes_fwd_ceil", tmp_path, rule, roles=("w_bwd", "a_bwd", "g_dgrad", "g_wgrad"))
    assert seen == {
        "bf16": {("bf16", "floor")},
        "e4m3-fwd": {("fp8_e4m3", "floor")},
        "e4m3-fwd-ceil": {("fp8_e4m3", "ceil")},
        "mxfp8_e4m3_ceil": {("fp8_e4m3", "ceil")},
    }
    assert back["e4m3-fwd"] == back["e4m3-fwd-ceil"] == hp and back["mxfp8_e4m3_ceil"] == {
        ("fp8_e4m3", "ceil")
    }
    assert _role_specs("lm_spikes_ceil", tmp_path / "ceil", rule) == {
        "bf16": {("bf16", "floor")},
        **{f"mxfp8_{f}": {(f"fp8_{f}", "floor")} for f in ("e4m3", "e5m2")},
        **{f"mxfp8_{f}_ceil": {(f"fp8_{f}", "ceil")} for f in ("e4m3", "e5m2")},
    }


def test_lm_spikes_e5m2_roles_trains_each_format_in_the_roles_its_name_says(tmp_path):
    """3.19 swaps E4M3 and E5M2 between the operands (weights and activations, in every GEMM) and the
    two gradient roles, all under E8M0's ceil rule: `e4m3_e5m2g` is the usual FP8 training recipe."""

    def rule(s):
        return s.elem.name, s.scale_rule.value

    operands = _role_specs("lm_spikes_e5m2_roles", tmp_path, rule, roles=("w", "a", "w_bwd", "a_bwd"))
    grads = _role_specs("lm_spikes_e5m2_roles", tmp_path / "g", rule, roles=("g_dgrad", "g_wgrad"))
    e4, e5 = ("fp8_e4m3", "ceil"), ("fp8_e5m2", "ceil")
    assert operands == {
        "bf16": {("bf16", "floor")},
        "mxfp8_e4m3_ceil": {e4},
        "mxfp8_e5m2_ceil": {e5},
        "e4m3_e5m2g_ceil": {e4},
        "e5m2_e4m3g_ceil": {e5},
    }
    assert grads == {**operands, "e4m3_e5m2g_ceil": {e5}, "e5m2_e4m3g_ceil": {e4}}


def test_lm_spikes_e5m2_grads_puts_e5m2_in_the_gradient_role_each_name_says(tmp_path):
    """3.20 sets E5M2 in dgrad's dY, in wgrad's dY, or both (rounded to nearest or stochastically),
    everything else MXFP8 E4M3, all under E8M0's ceil rule."""

    def fmt(s):
        return s.elem.name, s.scale_rule.value, s.rounding.value

    seen = {
        role: _role_specs("lm_spikes_e5m2_grads", tmp_path / role, fmt, roles=(role,))
        for role in ("w", "a", "w_bwd", "a_bwd", "g_dgrad", "g_wgrad")
    }
    e4, e5, e5sr = (
        ("fp8_e4m3", "ceil", "even"),
        ("fp8_e5m2", "ceil", "even"),
        ("fp8_e5m2", "ceil", "stochastic"),
    )
    names = [
        "mxfp8_e4m3_ceil",
        "e4m3_e5m2g_ceil",
        "e4m3_e5m2dgrad_ceil",
        "e4m3_e5m2wgrad_ceil",
        "e4m3_e5m2g_sr_ceil",
    ]
    for role in ("w", "a", "w_bwd", "a_bwd"):
        assert seen[role] == dict.fromkeys(names, {e4})
    assert [seen["g_dgrad"][n] for n in names] == [{e4}, {e5}, {e5}, {e4}, {e5sr}]
    assert [seen["g_wgrad"][n] for n in names] == [{e4}, {e5}, {e4}, {e5}, {e5sr}]


def test_lm_spikes_e5m2_head_quantizes_the_linears_each_name_says(tmp_path):
    """3.21 runs full E4M3 and E5M2 gradients with every Linear quantized, with the output head left in
    fp32 (`_hphead`) and with only the head quantized (`_headonly`): the converted model of each label
    has MX Linears exactly where its name says, in the formats its name says, and every LayerNorm stays
    converted (γ rounded to bf16) whatever the Linears do."""
    import quant
    from models import MODELS

    def fmt(s):
        return s.elem.name, s.scale_rule.value

    linears, norms, grads = {}, {}, {}
    for r in _planned("lm_spikes_e5m2_head", tmp_path):
        policy = r.run.precision.policy(seed=r.run.train.seed)
        model = quant.convert(MODELS["lm"](r.run.model, r.run.train.seed), policy)
        kinds = {name: type(m).__name__ for name, m in model.named_modules() if hasattr(m, "mx_policy")}
        label = r.run.logger.label
        linears.setdefault(label, set()).add(frozenset(n for n, k in kinds.items() if k == "MXLinear"))
        norms.setdefault(label, set()).add(frozenset(n for n, k in kinds.items() if k == "MXLayerNorm"))
        grads[label] = {fmt(policy.spec(role)) for role in ("g_dgrad", "g_wgrad")}
        assert {fmt(policy.spec(role)) for role in ("w", "a", "w_bwd", "a_bwd")} == {("fp8_e4m3", "ceil")}
        assert policy.norm_affine == "bf16"
    (every,) = linears["mxfp8_e4m3_ceil"]
    blocks = every - {"head"}
    assert "head" in every and len(blocks) == 8  # qkv, out, up, down in each of the 2 blocks
    assert len({n for ns in norms.values() for n in ns}) == 1 and len(next(iter(norms.values())).pop()) == 9
    for g in ("mxfp8_e4m3", "e4m3_e5m2g"):
        assert linears[f"{g}_ceil"] == {every}
        assert linears[f"{g}_ceil_hphead"] == {blocks}
        assert linears[f"{g}_ceil_headonly"] == {frozenset({"head"})}
        e = "fp8_e4m3" if g == "mxfp8_e4m3" else "fp8_e5m2"
        for where in ("", "_hphead", "_headonly"):
            assert grads[f"{g}_ceil{where}"] == {(e, "ceil")}


def test_lm_spikes_e5m2_lr_runs_3_20s_precisions_at_two_lower_lrs(tmp_path):
    """3.22 trains full E4M3 and E5M2 gradients rounded to nearest or stochastically, all under ceil,
    at lr 1e-2 and 3e-2 (the sweeper's grid over hydra.sweeper.params)."""

    def fmt(s):
        return s.elem.name, s.scale_rule.value, s.rounding.value

    grads = _role_specs("lm_spikes_e5m2_lr", tmp_path, fmt, roles=("g_dgrad", "g_wgrad"))
    operands = _role_specs("lm_spikes_e5m2_lr", tmp_path / "o", fmt, roles=("w", "a", "w_bwd", "a_bwd"))
    e4 = ("fp8_e4m3", "ceil", "even")
    assert operands == dict.fromkeys(grads, {e4})
    assert grads == {
        "mxfp8_e4m3_ceil": {e4},
        "e4m3_e5m2g_ceil": {("fp8_e5m2", "ceil", "even")},
        "e4m3_e5m2g_sr_ceil": {("fp8_e5m2", "ceil", "stochastic")},
    }
    with initialize_config_dir(config_dir=str(REPO / "conf"), version_base="1.3"):
        cfg = compose("config", overrides=["experiment=lm_spikes_e5m2_lr", *LOGGER], return_hydra_config=True)
    assert str(cfg.hydra.sweeper.params["train.lr"]) == "1e-2,3e-2"


def test_lm_spikes_e5m2_gamma_holds_every_norm_near_its_init_in_both_precisions(tmp_path):
    """3.23 trains full E4M3 and E5M2 gradients (to nearest) under ceil at lr 0.1 with every norm's γ and β
    at 1e-3 × the LR; the optimizer puts exactly the norms' parameters in that group."""
    from types import SimpleNamespace

    from models import MODELS
    from train.optim import make_optimizer

    def fmt(s):
        return s.elem.name, s.scale_rule.value, s.rounding.value

    grads = _role_specs("lm_spikes_e5m2_gamma", tmp_path, fmt, roles=("g_dgrad", "g_wgrad"))
    e4 = ("fp8_e4m3", "ceil", "even")
    assert grads == {"mxfp8_e4m3_ceil": {e4}, "e4m3_e5m2g_ceil": {("fp8_e5m2", "ceil", "even")}}
    runs = _planned("lm_spikes_e5m2_gamma", tmp_path / "o")
    assert {r.run.train.norm_lr_mult for r in runs} == {1e-3}
    r = runs[0].run
    model = MODELS["lm"](r.model, r.train.seed)
    task = SimpleNamespace(default_betas=(0.9, 0.95))  # the betas play no part here
    (held,) = [g for g in make_optimizer(model, r.train, task).param_groups if g.get("lr_mult") == 1e-3]
    norms = {n for n, p in model.named_parameters() if any(p is q for q in held["params"])}
    assert norms and all(n.rsplit(".", 2)[-2].endswith("norm") for n in norms)
    assert "norm.weight" in norms and "head.weight" not in norms
