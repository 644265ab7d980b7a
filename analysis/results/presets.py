"""Which preset (conf/experiment/) plays which part in study 1's sections: the re-runs of 1.1's
comparison and what each set out to change (one factor, a replication, a pilot's pick), the
from-init comparisons, the branch re-runs, the late-divergence search. A new sweep joins a section by
being named here; the sections read these tables and dispatch on them.
"""

from __future__ import annotations

LATE_SEARCH = (
    "proxy_late_search",
    "proxy_late_drift",
    "proxy_late_lr",
    "proxy_late_norm10",
    "proxy_late_wide",
    "proxy_released_late",
    "proxy_released_w512",
)
"""The late-divergence search's presets (conf/experiment/), in the order they were run."""


SETTING = (
    ("model.width", "width"),
    ("model.depth", "depth"),
    ("train.batch_size", "batch"),
    ("model.teacher", "teacher"),
    ("model.activation", "activation"),
    ("model.noise_std", "label noise"),
    ("train.betas", "Adam betas"),
)
"""The keys that tell one proxy setting from another (with ``train.lr``), and their names."""

EDGE = (
    "proxy_mechanism_lr3",
    "proxy_mechanism_lr5",
    "proxy_mechanism_lr_fine",
    "proxy_mechanism_seeds",
    "proxy_mechanism_seeds16",
    "proxy_mechanism_d128",
    "proxy_mechanism_d128_b64",
    "proxy_mechanism_d128_b1024",
    "proxy_mechanism_d128_seeds",
    "proxy_mechanism_d128_seeds32",
    "proxy_mechanism_d128_seeds40",
    "proxy_mechanism_d128_lr",
    "proxy_mechanism_d128_lr_fine",
    "proxy_mechanism_d128_depth8",
    "proxy_mechanism_d128_depth8_fine",
    "proxy_mechanism_d128_swiglu",
    "proxy_mechanism_d128_swiglu_hi",
    "proxy_mechanism_d128_beta95",
    "proxy_mechanism_d128_beta99",
    "proxy_mechanism_beta95",
    "proxy_released",
)
"""proxy_mechanism's comparison again (conf/experiment/): at another learning rate, width, depth, batch,
teacher or activation, or on fresh seeds; reported beside 1.1 and in the search log."""

PILOT = {"proxy_released": "proxy_released_search"}
"""A re-run of EDGE → the pilot sweep (of SEARCH) whose runs chose its setting: on seeds the pilot did
not use, the re-run is a pre-registered test of that setting."""

RECORD_DEFAULTS = {
    "train.norm_lr_mult": 1.0,
    "model.teacher": "residual",
    "model.activation": "gelu",
    "train.betas": [0.9, 0.999],
}
"""Fields that records from before the field existed lack (or leave null, for the task's default), and
the value those runs ran with (the residual teacher is also proxy_mechanism's, the baseline of the late
search; GeLU is ``ProxyConfig``'s activation; Adam's betas are the proxy task's default,
``train.objectives``)."""

ONE_FACTOR = {
    "proxy_mechanism_d128_b64": "proxy_mechanism_d128",
    "proxy_mechanism_d128_b1024": "proxy_mechanism_d128",
    "proxy_mechanism_d128_beta95": "proxy_mechanism_d128",
    "proxy_mechanism_d128_beta99": "proxy_mechanism_d128",
    "proxy_mechanism_beta95": "proxy_mechanism",
}
"""A re-run of EDGE that changes one setting of another sweep of EDGE (set before it ran, on that
sweep's seeds) → that sweep: the report sets their outcomes side by side, seed by seed."""

REPLICATION = {
    "proxy_mechanism_d128_seeds": "proxy_mechanism_d128",
    "proxy_mechanism_d128_seeds32": "proxy_mechanism_d128",
    "proxy_mechanism_d128_seeds40": "proxy_mechanism_d128",
}
"""A re-run of EDGE on fresh seeds at another sweep of EDGE's setting → that sweep (a replication of its
rates; the scans pool them). proxy_mechanism's own replication is told by its setting instead."""

SEARCH = ("proxy_released_search", "proxy_beta95_search")
"""Pilot sweeps over several settings at once (conf/experiment/): reported in the search log only."""

RERUN_BRANCHES = (
    "proxy_mechanism_d128",
    "proxy_mechanism_d128_beta95",
    "proxy_mechanism_d128_beta99",
    "proxy_mechanism_d128_early",
    "proxy_mechanism_d128_step20",
    "proxy_mechanism_d128_adam_branch",
    "proxy_mechanism_d128_adam_dose",
    "proxy_mechanism_adam_branch",
    "proxy_mechanism_seeds16_adam_branch",
    "proxy_mechanism_d128_adam_state",
    "proxy_released",
    "proxy_canonical_interventions",
)
"""Re-runs with interventions (conf/experiment/), reported beside 1.3: at other branch points."""

STEP_SOURCE = {
    "proxy_mechanism_d128_step_source": "mx_ln_e4m3",
    "proxy_mechanism_d128_step_predict": "mx_ln_e4m3",
}
"""Phase-1 sweeps that train the same seeds from init in several precisions beside their fp32 twins
(conf/experiment/) → the precision the others are set against seed by seed: which quantized tensor
gives Adam its larger step (``analysis.proxy.step_source``), reported under 1.2."""

STEP_PREDICTION = {"proxy_mechanism_d128_step_predict": "proxy_mechanism_d128_step_source"}
"""A STEP_SOURCE sweep on fresh seeds → the sweep whose runs fixed the step threshold it tests
(``proxy.step_threshold``, pooled over every run there): "blows up iff its step > threshold"."""

CLAMP_CONTROL = {
    "proxy_mechanism_d128_ceil": (
        "proxy_mechanism_d128_step_source",
        {"ln_only_ceil": "ln_only", "mx_ln_ceil": "mx_ln_e4m3"},
    ),
    "proxy_mechanism_d128_ceil_fresh": (
        "proxy_mechanism_d128_step_predict",
        {"ln_only_ceil": "ln_only", "mx_ln_ceil": "mx_ln_e4m3"},
    ),
}
"""γ's clamp against γ's rounding (conf/experiment/): a sweep with γ in E4M3 under E8M0's ceil rule
(same grid near 1, nothing saturates) → (the STEP_SOURCE sweep with the floor rule on the same seeds,
{its precision: the floor precision it is set against seed by seed}), reported under 1.2."""

GAMMA_FORMAT = (
    ("proxy_mechanism_d128_bf16", "proxy_mechanism_d128", {"mx_ln_bf16": "mx_ln_e4m3"}),
    ("proxy_mechanism_d128_bf16", "proxy_mechanism_d128_rerun", {"mx_ln_bf16": "mx_ln_e4m3"}),
    ("proxy_mechanism_d128_bf16_seeds", "proxy_mechanism_d128_seeds", {"mx_ln_bf16": "mx_ln_e4m3"}),
    ("proxy_mechanism_d128_bf16_seeds", "proxy_mechanism_d128_seeds32", {"mx_ln_bf16": "mx_ln_e4m3"}),
)
"""γ rounded without a block scale (conf/experiment/): (a sweep with γ/β in bf16, no 0.875 clamp; a
sweep with γ/β in E4M3 on the same seeds from init; {its precision: the E4M3 precision it is set against
seed by seed}), reported under 1.2 beside the clamp controls. proxy_mechanism_d128 ran on another
machine (its twins differ from these in every seed); its rerun here is the same-machine pair."""

FROM_INIT = {
    "proxy_mechanism_d128_swiglu_source": (
        "proxy_mechanism_d128_swiglu_hi",
        {"mx_ln_none": "mx_ln_none", "mx_bf16a": "mx_ln_none", "mx_fwd": "mx_ln_none"},
    ),
    "proxy_mechanism_d128_swiglu_fresh": (
        "proxy_mechanism_d128_swiglu_fresh",
        {"mx_bf16a": "mx_ln_none", "mx_fwd": "mx_ln_none"},
    ),
    "proxy_mechanism_d128_fwd": ("proxy_mechanism_d128", {"mx_fwd": "mx_ln_none"}),
    "proxy_mechanism_seeds16_source": (
        "proxy_mechanism_seeds16",
        {"ln_only": "mx_ln_e4m3", "mx_bf16a_ln": "mx_ln_e4m3"},
    ),
}
"""1.3's interventions held from init (conf/experiment/): a sweep that retrains another sweep's seeds at
its LRs in the precisions the interventions switch to (bf16 activations, forward-only MX; the same
precision again is the same-machine check) → (that sweep, {its precision: the precision it is set
against, pair by pair of LR and seed}; the sweep itself for fresh seeds, its precisions set against one
of its own), reported beside 1.3."""

CONTROL = {"proxy_mechanism_d128_control": "proxy_mechanism_d128_step20"}
"""A control of 1.3 (conf/experiment/) → the re-run whose γ-in-E4M3 branches it repeats: both
variants' parents branched into fp32 at the same step, to tell a γ-clamped prefix from any MX prefix."""

# 1.3 judges a rate, "≥ 2/3 of the branches of parents that blew up": on one or two parents that is
# one or two runs, and a single parent that lands just under the blow-up line after its branch point
# would call the claim reproduced. Below this many parents a setting is at most partially reproduced.
MIN_PARENTS = 3
