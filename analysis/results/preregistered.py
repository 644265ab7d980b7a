"""The pre-registered claims of our own, each tested on fresh seeds with its predictions fixed in its
preset's header before it ran (``Preregistered``): 3.2 (the format's quantization error, not its bit
count, orders the loss gap), 3.3 (the E8M0 scale rule moves the loss as that error does), 3.4 (is
ceil's cost for E2M1 the gradients' rounding to nearest?), 3.5 (study 2's inversion, in the
gradients of LM training), 3.6 (UE5M3-alone's cost there is the gradients'), 3.7 (with NVFP4's
per-tensor scale UE5M3 trains as NVFP4 does), 3.8 (finer MXFP4 blocks help: the loss follows the
values flushed to 0, not the MSE), 3.9 (without the floor rule's clamp finer MXFP4 blocks help more),
3.10 (3.6's D3 on fresh seeds), 3.11 (where stochastic rounding of the gradients helps), 3.12
(where it costs: under the floor rule's clamp), 3.13 (the gradients' clamp) and 3.14 (with ceil SR
gradients, the forward's rule).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from analysis.instability import FINISHED, instability_map
from analysis.lmstudy import ALPHA
from analysis.report import md_table
from analysis.results.common import NOT, NOT_RUN, PARTIAL, REPRODUCED, Source, _Doc, _rel, _seed_list
from records import TENSOR_ERROR


@dataclass(frozen=True)
class Prediction:
    """One pre-registered prediction: ``worse`` ends above ``better`` (one-sided paired t), or, with a
    ``margin``, the two are equivalent (|Δ| < margin by TOST), or, with ``minus``, the gap between them
    exceeds another. Formats by their sweep names."""

    name: str
    worse: str
    better: str
    margin: float | None = None
    minus: tuple[str, str] | None = None
    """(c, d): the prediction is that the gap worse − better exceeds the gap c − d (matched runs)."""
    measured: bool = False
    """Not a prediction: a contrast reported beside them, with no "holds" (Δ = worse − better)."""


@dataclass(frozen=True)
class Preregistered:
    """A claim of our own, tested on fresh seeds with predictions fixed in its preset's header before
    it ran: the section's title, what it tests and how (``why``), the sweep (``preset``; its figure is
    ``<preset>.png``), its predictions, which of them decide the verdict (``decide``: reproduced when all
    hold, partially when some do), and what a reader should set the outcome against (``contrast``). The
    section writes the rule's sentence itself (``rule``), from the same fields."""

    title: str
    why: str
    preset: str
    predictions: tuple[Prediction, ...]
    decide: tuple[str, ...]
    contrast: str
    first: str | None = None
    """A prediction that must hold for anything above "not reproduced" (then partially when it holds
    but not all of ``decide``)."""
    price: str = "closed_form"
    """How each format's error is priced for the error-ratio column (a key of ``PRICES``): the Gaussian
    closed form, or the trained models' own tensors where the error depends on the tensor's magnitude
    (float block scales without a per-tensor scale), which the closed form cannot know."""
    figure: str = "format_error"
    """The section's Δ-vs-bf16 table and figure (a key of ``FIGURES``)."""
    explore: str | None = None
    """The sweep the predictions were read off, shown beside the test as the exploratory sample (when
    it trained the same formats)."""
    compare: tuple[str, str] | None = None
    """Two labels whose errors on the trained tensors the section sets side by side, operand by operand
    (the first over the second), where ``why`` argues from that comparison."""
    metrics: tuple[str, ...] = ("rel_mse", "flushed")
    """The indices of the trained tensors' table (keys of ``TENSOR_METRICS``): the norm index only
    where ``why`` argues from it, since every index adds a column per operand."""

    def rule(self, seeds: str | None = None) -> str:
        """``why``, where the predictions were fixed and the verdict's rule, in words."""
        fixed = f"before it ran them on fresh seeds {seeds}" if seeds else "before it ran"
        if self.decide == (self.first,):  # one prediction decides: nothing in between
            verdicts = f"reproduced when {self.first} holds; not when {self.first} fails"
        elif self.first is None:
            verdicts = f"reproduced when {_and(self.decide)} hold; partially when some do; not when none does"
        else:
            rest = " or ".join(h for h in self.decide if h != self.first)
            verdicts = (
                f"reproduced when {_and(self.decide)} hold; partially when {self.first} holds but not "
                f"{rest}; not when {self.first} fails"
            )
        own = [h.name for h in self.predictions if h.name not in self.decide and not h.measured]
        one = len(own) == 1
        alone = (
            f" {_and(own)} {'is' if one else 'are'} reported on {'its' if one else 'their'} own."
            if own
            else ""
        )
        return (
            f"{self.why} The predictions below were fixed in `conf/experiment/{self.preset}.yaml` {fixed}. "
            f"Rule: {verdicts}.{alone}"
        )

    def verdict(self, held: dict[str, bool]) -> str:
        """The rule applied to which predictions held on the fresh seeds."""
        if self.first is not None and not held.get(self.first, False):
            return NOT
        core = [held.get(h, False) for h in self.decide]
        return REPRODUCED if all(core) else PARTIAL if any(core) else NOT


def _and(names: tuple[str, ...] | list[str]) -> str:
    """ "H1", "H1 and H2", "H1, H2 and H3"."""
    names = list(names)
    return " and ".join([", ".join(names[:-1]), names[-1]] if len(names) > 1 else names)


FORMAT_ERROR = Preregistered(
    title="3.2 The format's quantization error, not its bits per element, orders the loss gap "
    "(pre-registered)",
    why=(
        "The closed-form relative MSE of Gaussian blocks (2.3's error model, averaged over an octave of σ) "
        "orders the MX formats by mantissa bits, not width: E2M3 (6 bits) < E4M3 (8) < E5M2 (8) = E3M2 (6). "
        "lm_precisions showed the loss gaps in that order. Δ = final val loss of the first format − the "
        "second's on matched runs (as 1.5); one-sided paired t-test over the pairs, α = 0.05; equivalence by "
        "two one-sided tests (TOST) at the margin."
    ),
    preset="lm_format_error",
    predictions=(
        Prediction("H1", "mxfp6_e3m2", "mxfp6_e2m3"),
        Prediction("H2", "mxfp8_e5m2", "mxfp8_e4m3"),
        Prediction("H3", "mxfp8_e5m2", "mxfp6_e3m2", 0.0075),
        Prediction("H4", "mxfp8_e4m3", "mxfp6_e2m3"),
    ),
    decide=("H1", "H2", "H3"),
    contrast="A bits-per-element law (3.1's m_P ordered by width) predicts no gap in H1 and H2 and the "
    "opposite of H4.",
    explore="lm_precisions",
)
"""3.2, as fixed in conf/experiment/lm_format_error.yaml before it ran."""

SCALE_RULE = Preregistered(
    title="3.3 The E8M0 scale rule moves the loss as the error model says: ceil helps E4M3, not E2M3 "
    "(pre-registered)",
    why=(
        "Only the E8M0 scale rule changes: floor (OCP; a block max in [0.875, 1) of E4M3's top binade clamps "
        "to 448) or ceil (never clamps; Mishra et al. 2025 round MXFP8's scale up). The closed-form error "
        "(as in 3.2; the error ratio below) predicts that ceil lowers E4M3's below E2M3's, leaves E2M3's "
        "and raises E2M1's a little. Tests as in 3.2."
    ),
    preset="lm_scale_rule",
    predictions=(
        Prediction("G1", "mxfp8_e4m3", "mxfp8_e4m3_ceil"),
        Prediction("G2", "mxfp6_e2m3", "mxfp8_e4m3_ceil"),
        Prediction("G3", "mxfp6_e2m3", "mxfp6_e2m3_ceil", 0.003),
        Prediction("G4", "mxfp4_e2m1_ceil", "mxfp4_e2m1"),
    ),
    decide=("G1", "G2", "G3"),
    contrast="Bits per element are the same on both sides of G1, G3 and G4: a law in bits predicts no gap "
    "there, and G2 the opposite (8-bit E4M3 was the worse in 3.2's H4).",
)
"""3.3, as fixed in conf/experiment/lm_scale_rule.yaml before it ran."""

GRAD_SR = Preregistered(
    title="3.4 Ceil's cost for E2M1 lies in rounding the gradients to nearest: stochastic rounding of the "
    "gradients shrinks it (pre-registered)",
    why=(
        "3.3 left a hypothesis: ceil's cost for E2M1 (its MSE unchanged on the trained tensors) is the "
        "values it flushes to 0, most of them in the gradients. Stochastic rounding keeps each value in "
        "expectation, so nothing is lost on average (it removes every systematic rounding loss, of which "
        "flushing is the largest here); `precision.grad_rounding=stochastic` applies it to the two gradient "
        "roles only. E2M1 under floor and ceil, gradients rounded to nearest or stochastically; tests as "
        "in 3.2."
    ),
    preset="lm_grad_sr",
    predictions=(
        Prediction("S1", "mxfp4_e2m1_ceil", "mxfp4_e2m1"),
        Prediction("S2", "mxfp4_e2m1_ceil", "mxfp4_e2m1", minus=("mxfp4_e2m1_ceil_sr", "mxfp4_e2m1_sr")),
        Prediction("SR", "mxfp4_e2m1_ceil_sr", "mxfp4_e2m1_sr", measured=True),
        Prediction("best", "mxfp4_e2m1_ceil_sr", "mxfp4_e2m1", measured=True),
    ),
    decide=("S1", "S2"),
    first="S1",
    contrast="Measured beside them: SR, ceil's excess over floor with the gradients rounded "
    "stochastically; best, ceil with stochastic gradients against the OCP default (floor, nearest).",
)
"""3.4, as fixed in conf/experiment/lm_grad_sr.yaml before it ran."""

BLOCK_SCALE = Preregistered(
    title="3.5 Study 2's inversion inside training: finer FP4 blocks help under a per-tensor scale, not "
    "under UE5M3 alone, whose range the gradients sit at the bottom of (pre-registered)",
    why=(
        "Study 2 (2.1, 2.2) finds on weights that FP4 with UE4M3 block scales gets worse with smaller blocks "
        "below σ ≈ 0.02, where a small block's scale underflows, and that UE5M3 or a per-tensor scale fix "
        "it. In training the smallest tensors are the gradients (a loss averaged over thousands of tokens): "
        "below UE4M3's range altogether, and at the bottom of UE5M3's, which reaches 2⁸ lower. E2M1 in "
        "blocks of 8, 16 and 32 under UE4M3 with NVFP4's per-tensor scale (`precision.global_scale=true`; "
        "blocks of 16 are NVFP4) and under UE5M3 alone; predictions read off the error of seed 3's bf16 "
        "runs' own tensors (`python -m train.tensor_error --formats fp4_blocks`). Tests as in 3.2."
    ),
    preset="lm_block_scale",
    predictions=(
        Prediction("B1", "nvfp4_bs32", "nvfp4"),
        Prediction("B2", "nvfp4", "nvfp4_bs8"),
        Prediction("B3", "ue5m3_bs8", "ue5m3_bs32", minus=("nvfp4_bs8", "nvfp4_bs32")),
        Prediction("B4", "ue5m3_bs16", "nvfp4"),
        Prediction("finer", "ue5m3_bs8", "ue5m3_bs32", measured=True),
    ),
    decide=("B1", "B2", "B3", "B4"),
    first="B3",
    contrast="Measured beside them: finer, blocks of 8 against 32 under UE5M3 alone (the inversion outright; "
    "the tensors disagreed by shape, so no direction was predicted). Weights and activations have the "
    "same error under both scale families at each block size: only the gradients tell them apart.",
    price="tensors",
    figure="block_size",
    compare=("ue5m3_bs16", "nvfp4"),
)
"""3.5, as fixed in conf/experiment/lm_block_scale.yaml before it ran."""

BLOCK_GRADS = Preregistered(
    title="3.6 UE5M3-alone's cost in 3.5 is its gradients': kept in bf16, the two scale families train "
    "alike (pre-registered)",
    why=(
        "In 3.5 FP4 E2M1 in blocks of 16 under UE5M3 alone ended far above NVFP4 (UE4M3 with a per-tensor "
        "scale), where study 2 (2.2) has UE5M3 as the fix. On the bf16 runs' own tensors the two families "
        "quantize weights and activations alike and differ in the gradients (the ratios under the tensor "
        "table below). Each family trained as is "
        "and with the incoming gradient kept in bf16 in both backward GEMMs (`precision.g_dgrad=bf16`; "
        'weights and saved activations stay FP4 there); the error ratios below are "–" because a '
        "format with bf16 gradients has no one tensor price. Tests as in 3.2."
    ),
    preset="lm_block_grads",
    predictions=(
        Prediction("D1", "ue5m3_bs16", "ue5m3_bs16_bf16g"),
        Prediction("D2", "ue5m3_bs16", "ue5m3_bs16_bf16g", minus=("nvfp4", "nvfp4_bf16g")),
        Prediction("D3", "ue5m3_bs16_bf16g", "nvfp4_bf16g", 0.0075),
        Prediction("nvfp4 grads", "nvfp4", "nvfp4_bf16g", measured=True),
    ),
    decide=("D1", "D2", "D3"),
    first="D1",
    contrast="Measured beside them: NVFP4's own cost in its gradients (nvfp4 − nvfp4_bf16g).",
    price="tensors",
    figure="gradients",
    compare=("ue5m3_bs16", "nvfp4"),
)
"""3.6, as fixed in conf/experiment/lm_block_grads.yaml before it ran."""

BLOCK_GLOBAL = Preregistered(
    title="3.7 UE5M3 needs a per-tensor scale in training: with NVFP4's, it trains as NVFP4 does and finer "
    "blocks help (pre-registered)",
    why=(
        "3.5 and 3.6 put UE5M3-alone's cost in its gradients, whose magnitude sits at the bottom of UE5M3's "
        "range. NVFP4's second level, a per-tensor fp32 scale (`precision.global_scale=true`), maps each "
        "tensor's max to the top of the block scale's range whatever the tensor's size: UE5M3 then has "
        "UE4M3's 3 mantissa bits and more range below the max, which these tensors' blocks do not need. "
        "On the bf16 runs' own tensors of 3.5 and 3.6 the two scale formats under a per-tensor scale "
        "quantize every operand alike, and finer blocks lower every operand's error, the gradients' too "
        "(the ratios under the tensor table below). E2M1 under UE5M3 with a per-tensor scale in blocks of "
        "8, 16 and 32, beside NVFP4 and UE5M3 alone at 16. Tests as in 3.2."
    ),
    preset="lm_block_global",
    predictions=(
        Prediction("E1", "ue5m3_bs16", "ue5m3_global_bs16"),
        Prediction("E2", "ue5m3_global_bs16", "nvfp4", 0.0075),
        Prediction("E3", "ue5m3_global_bs32", "ue5m3_global_bs8"),
        Prediction("finer", "ue5m3_global_bs16", "ue5m3_global_bs8", measured=True),
    ),
    decide=("E1", "E2", "E3"),
    first="E1",
    contrast="Measured beside them: finer, the step from blocks of 16 to 8 under UE5M3 with a per-tensor "
    "scale (3.5's B2 under NVFP4's).",
    price="tensors",
    figure="block_size",
    compare=("ue5m3_global_bs16", "nvfp4"),
)
"""3.7, as fixed in conf/experiment/lm_block_global.yaml before it ran."""

BLOCK_E8M0 = Preregistered(
    title="3.8 Finer blocks help MXFP4 in training: the loss follows the values flushed to 0, not the "
    "MSE (pre-registered)",
    why=(
        "Under MXFP4's E8M0 (power-of-two) block scales, floor rule, finer blocks do not lower the trained "
        "tensors' MSE: a block's max lands in [4, 8) of E2M1's units, where the grid has only 4 and 6, and "
        "in a small block the max is a larger share of its energy. They still flush fewer values to 0 "
        "(the ratios under the tensor table below). 3.3 and 3.4 found E2M1's cost follows the values it "
        "flushes, not its MSE; so finer E8M0 blocks should help, where the MSE predicts no gain. E2M1 under "
        "E8M0 in blocks of 8, 16 and 32 beside NVFP4; predictions read off the 162 bf16 runs' own tensors "
        "of 3.5–3.7. Tests as in 3.2."
    ),
    preset="lm_block_e8m0",
    predictions=(
        Prediction("F1", "mxfp4_e2m1", "mxfp4_e2m1_bs8"),
        Prediction("F2", "mxfp4_e2m1", "mxfp4_e2m1_bs16"),
        Prediction("F3", "mxfp4_e2m1_bs16", "nvfp4"),
        Prediction("finer", "mxfp4_e2m1_bs16", "mxfp4_e2m1_bs8", measured=True),
    ),
    decide=("F1", "F2", "F3"),
    first="F1",
    contrast="Measured beside them: finer, the step from blocks of 16 to 8 under E8M0, where the flushed "
    "share falls again (the tensor table below) and so points to a further gain; the MSE does not. The "
    "error ratio column prices by the MSE: where it is near 1, the MSE predicts no gap.",
    price="tensors",
    figure="block_size",
    compare=("mxfp4_e2m1_bs8", "mxfp4_e2m1"),
)
"""3.8, as fixed in conf/experiment/lm_block_e8m0.yaml before it ran."""

BLOCK_CEIL = Preregistered(
    title="3.9 Without the floor rule's clamp, finer blocks help MXFP4 more (pre-registered)",
    why=(
        "In 3.8 finer E8M0 blocks helped MXFP4 (floor rule) from 32 to 16 and then stopped, and by a fifth "
        "of the float-scale families' gain. Under floor a block's max lands in [4, 8) of E2M1's units and "
        "clamps above 6; a smaller block has a larger share of maxima, so the clamp's error grows as the "
        "block shrinks: the trained tensors' MSE does not fall from 32 to 8. Under ceil (the smallest "
        "power of two that fits the max: it lands in (3, 6] and never clamps) finer blocks lower the MSE "
        "and the flushed share both, while ceil flushes more than floor at every block size (its cost in "
        "3.3 and 3.4). The hypothesis: without the clamp finer blocks help more and keep helping down to "
        "8, and ceil's excess flushing still leaves it behind floor at 8, where its MSE is lower (the "
        "ratios under the tensor table below). E2M1 under E8M0 in blocks of 8, 16 and 32 under both rules; "
        "predictions read off the 216 bf16 runs' own tensors of 3.5–3.8. Tests as in 3.2."
    ),
    preset="lm_block_ceil",
    predictions=(
        Prediction("C1", "mxfp4_e2m1_ceil", "mxfp4_e2m1_ceil_bs8"),
        Prediction("C2", "mxfp4_e2m1_ceil", "mxfp4_e2m1_ceil_bs8", minus=("mxfp4_e2m1", "mxfp4_e2m1_bs8")),
        Prediction("C3", "mxfp4_e2m1_ceil_bs16", "mxfp4_e2m1_ceil_bs8"),
        Prediction("C4", "mxfp4_e2m1_ceil_bs8", "mxfp4_e2m1_bs8"),
        Prediction("ceil32", "mxfp4_e2m1_ceil", "mxfp4_e2m1", measured=True),
        Prediction("finer", "mxfp4_e2m1_bs16", "mxfp4_e2m1_bs8", measured=True),
    ),
    decide=("C1", "C2", "C3", "C4"),
    first="C1",
    contrast="Measured beside them: ceil32, ceil's cost over floor at blocks of 32 (3.3's G4 and 3.4's S1 "
    "on fresh seeds); finer, 3.8's step from 16 to 8 under floor on fresh seeds. C2 and C4 set the two "
    "error indices against each other: from 32 to 8 ceil's MSE falls where floor's does not, and at 8 "
    "ceil's MSE is the lower and its flushed share the higher.",
    price="tensors",
    figure="block_size",
    compare=("mxfp4_e2m1_ceil_bs8", "mxfp4_e2m1_bs8"),
)
"""3.9, as fixed in conf/experiment/lm_block_ceil.yaml before it ran."""

BLOCK_GRADS_FRESH = Preregistered(
    title="3.10 With the gradients in bf16, UE5M3 alone trains as NVFP4 does: 3.6's D3 on fresh seeds "
    "(pre-registered)",
    why=(
        "In 3.6 D3 failed: with the incoming gradient kept in bf16, E2M1 in blocks of 16 under UE5M3 alone "
        "ended +0.0050 above NVFP4, a 90 % interval of [+0.0011, +0.0090] that reaches past the ±0.0075 "
        "margin. With the gradients in bf16 the two families differ only in how they quantize weights and "
        "activations, and on the 216 bf16 runs' own tensors of 3.5–3.8 those errors agree run by run "
        "(W ×0.999, X ×1.000, X_T ×0.999; UE5M3 under a per-tensor scale alike), and 3.7 found UE5M3 "
        "under a per-tensor scale equivalent to NVFP4. The hypothesis: 3.6's residual was sampling noise. "
        "A replication on fresh seeds: 3.6's two runs with bf16 gradients, and UE5M3 under NVFP4's "
        "per-tensor scale with bf16 gradients; the exploratory rows are 3.6's own seeds. Tests as in 3.2."
    ),
    preset="lm_block_grads_fresh",
    predictions=(
        Prediction("R1", "ue5m3_bs16_bf16g", "nvfp4_bf16g", 0.0075),
        Prediction("R2", "ue5m3_global_bs16_bf16g", "nvfp4_bf16g", 0.0075),
        Prediction("per-tensor", "ue5m3_bs16_bf16g", "ue5m3_global_bs16_bf16g", measured=True),
    ),
    decide=("R1", "R2"),
    contrast="Measured beside them: per-tensor, what NVFP4's per-tensor scale does for UE5M3 with the "
    "gradients in bf16.",
    price="tensors",
    figure="gradients",
    explore="lm_block_grads",
)
"""3.10, as fixed in conf/experiment/lm_block_grads_fresh.yaml before it ran."""

GRAD_SR_RECIPES = Preregistered(
    title="3.11 Stochastic rounding of the gradients helps only where rounding to nearest flushes the "
    "most (pre-registered)",
    why=(
        "In 3.4 stochastic rounding (SR) of the two gradient roles removed ceil's cost for E2M1 in blocks "
        "of 32 and made ceil the better rule, while it made floor worse: where rounding to nearest flushes "
        "little that SR would keep, SR brings only its noise. In 3.9 ceil's cost over floor was a "
        "large-block effect, gone at blocks of 8. On lm_block_ceil's bf16 runs' own tensors the gradients "
        "lose to 0 under ceil at 32 far more (flushed dY 0.249, dY_T 0.264) than under ceil at 8 (0.152, "
        "0.167) or NVFP4 (0.152, 0.168), which flush no more than floor at 32 did (0.206, 0.215). The "
        "hypothesis: SR helps where rounding to nearest flushes the most and costs elsewhere; and the "
        "practical question beside it, does MXFP4 under ceil with SR gradients beat NVFP4? NVFP4, and "
        "E2M1 under E8M0 ceil in blocks of 32 and 8, the gradients rounded to nearest or stochastically "
        "(`precision.grad_rounding=stochastic`). Tests as in 3.2."
    ),
    preset="lm_grad_sr_recipes",
    predictions=(
        Prediction("T1", "nvfp4", "mxfp4_e2m1_ceil_sr"),
        Prediction("T2", "nvfp4_sr", "nvfp4"),
        Prediction("T3", "mxfp4_e2m1_ceil_bs8_sr", "mxfp4_e2m1_ceil_bs8"),
        Prediction("both SR", "mxfp4_e2m1_ceil_sr", "nvfp4_sr", measured=True),
        Prediction("two fixes", "mxfp4_e2m1_ceil_bs8", "mxfp4_e2m1_ceil_sr", measured=True),
    ),
    decide=("T1", "T2", "T3"),
    contrast="Measured beside them: both SR, MXFP4 under ceil against NVFP4 with the gradients of both "
    "rounded stochastically (NVIDIA's NVFP4 training recipe rounds its gradients so); two fixes, the two "
    "ways found to remove ceil's cost, finer blocks (3.9) or SR gradients (3.4), against each other.",
    price="tensors",
    figure="rounding",
    compare=("mxfp4_e2m1_ceil_bs8", "nvfp4"),
)
"""3.11, as fixed in conf/experiment/lm_grad_sr_recipes.yaml before it ran."""

GRAD_SR_CLAMP = Preregistered(
    title="3.12 Stochastic rounding of the gradients costs where the scale rule clamps them (pre-registered)",
    why=(
        "Stochastic rounding (SR) of the two gradient roles helped every FP4 format whose scale fits the "
        "block's max, E2M1 under E8M0 ceil at blocks of 32 (3.4) and 8 (3.11) and NVFP4 (3.11), and cost "
        "the one whose scale clamps it, E2M1 under OCP's floor rule at 32 (3.4: +0.019). 3.11's reading, "
        "that SR helps where rounding to nearest flushes the most, failed. On the 108 bf16 runs' own "
        "tensors of 3.9 and 3.11 the index that parts floor from the others is the quantizer's bias in "
        "size, ‖Q(t)‖/‖t‖: floor's clamp shrinks the gradients (dY 0.960 at blocks of 32, 0.948 at 8), "
        "ceil and NVFP4 keep their size (1.001–1.004). The hypothesis: SR costs where the rule clamps the "
        "gradients and helps where it does not. Floor at blocks of 8 decides between the two readings: it "
        "clamps the most and flushes the least (dY 0.124, NVFP4 0.152). E2M1 under floor at blocks of 32 "
        "and 8 and NVFP4, the gradients rounded to nearest or stochastically. Tests as in 3.2."
    ),
    preset="lm_grad_sr_clamp",
    predictions=(
        Prediction("V1", "mxfp4_e2m1_sr", "mxfp4_e2m1"),
        Prediction("V2", "mxfp4_e2m1_bs8_sr", "mxfp4_e2m1_bs8"),
        Prediction("V3", "nvfp4", "nvfp4_sr"),
        Prediction("finer", "mxfp4_e2m1", "mxfp4_e2m1_bs8", measured=True),
        Prediction("finer SR", "mxfp4_e2m1_sr", "mxfp4_e2m1_bs8_sr", measured=True),
    ),
    decide=("V1", "V2", "V3"),
    first="V2",
    contrast="Measured beside them: finer, 3.8's F1 (floor blocks of 32 against 8) on fresh seeds; finer "
    "SR, the same with the gradients rounded stochastically.",
    price="tensors",
    figure="rounding",
    compare=("mxfp4_e2m1_bs8", "nvfp4"),
    metrics=("rel_mse", "flushed", "norm"),
)
"""3.12, as fixed in conf/experiment/lm_grad_sr_clamp.yaml before it ran."""

GRAD_SR_GCEIL = Preregistered(
    title="3.13 Stochastic rounding costs under the floor rule through the gradients' clamp (pre-registered)",
    why=(
        "Stochastic rounding (SR) of the gradients cost E2M1 under floor at blocks of 32 (3.4, 3.12) and "
        "8 (3.12) and helped every format whose scale does not clamp the block's max (ceil, NVFP4; 3.4, "
        "3.11, 3.12). Floor shrinks every operand of the trained tensors, the gradients most (‖Q(t)‖/‖t‖ "
        "on the 162 bf16 runs of 3.9, 3.11 and 3.12: W 0.984, X 0.984, dY 0.960, dY_T 0.959; ceil: dY "
        "1.002, dY_T 1.004). 3.12 did not say which tensors' clamp SR pays for. The hypothesis: the "
        "gradients'. `precision.grad_scale_rule=ceil` takes the clamp off the two gradient roles alone, "
        "weights and activations keeping floor's; SR should then help as under ceil, and 3.4's reading, "
        "that ceil's cost for E2M1 lies in rounding the gradients to nearest, says ceil on the gradients "
        "alone costs with nearest rounding. E2M1 in blocks of 32 under floor everywhere or with ceil "
        "gradients, the gradients rounded to nearest or stochastically. Tests as in 3.2."
    ),
    preset="lm_grad_sr_gceil",
    predictions=(
        Prediction("W1", "mxfp4_e2m1_gceil", "mxfp4_e2m1_gceil_sr"),
        Prediction("W2", "mxfp4_e2m1_sr", "mxfp4_e2m1_gceil_sr"),
        Prediction("W3", "mxfp4_e2m1_gceil", "mxfp4_e2m1"),
        Prediction("floor SR", "mxfp4_e2m1_sr", "mxfp4_e2m1", measured=True),
        Prediction("recipe", "mxfp4_e2m1_gceil_sr", "mxfp4_e2m1", measured=True),
    ),
    decide=("W1", "W2", "W3"),
    first="W1",
    contrast="Measured beside them: floor SR, 3.12's V1 on fresh seeds; recipe, floor on weights and "
    "activations with ceil SR gradients against OCP's default (floor, nearest) throughout.",
    price="tensors",
    figure="rounding",
    metrics=("rel_mse", "flushed", "norm"),
)
"""3.13, as fixed in conf/experiment/lm_grad_sr_gceil.yaml before it ran."""

GRAD_SR_FORWARD = Preregistered(
    title="3.14 With ceil stochastic gradients the forward's E8M0 rule does not matter, and NVFP4 stays "
    "ahead (pre-registered)",
    why=(
        "3.13 put ceil's cost for E2M1 wholly in the gradients: ceil on the gradients alone, rounded to "
        "nearest, ended +0.324 above bf16, ceil everywhere +0.337 in 3.9; with stochastically rounded "
        "(SR) gradients the two ended alike too (+0.069 in 3.11, +0.065 in 3.13), each on its own seeds. "
        "The forward operands differ little between the rules on the trained tensors (162 bf16 runs of "
        "3.9, 3.11 and 3.12: MSE W 0.0131 floor, 0.0133 ceil; X 0.0147, 0.0147). The hypothesis: with "
        "ceil SR gradients the forward's rule does not matter, and NVFP4 with SR gradients stays ahead "
        "of MXFP4 (3.11 measured +0.0076, 90 % CI [+0.0042, +0.0111]). MXFP4 in blocks of 32 with ceil "
        "SR gradients under a ceil or a floor forward, beside NVFP4 with SR gradients, on one set of "
        "seeds. Tests as in 3.2."
    ),
    preset="lm_grad_sr_forward",
    predictions=(
        Prediction("X1", "mxfp4_e2m1_ceil_sr", "mxfp4_e2m1_gceil_sr", 0.0075),
        Prediction("X2", "mxfp4_e2m1_ceil_sr", "nvfp4_sr"),
        Prediction("floor forward", "mxfp4_e2m1_gceil_sr", "nvfp4_sr", measured=True),
    ),
    decide=("X1", "X2"),
    first="X1",
    contrast="Measured beside them: floor forward, MXFP4 with a floor forward and ceil SR gradients "
    "against NVFP4 with SR gradients.",
    price="tensors",
    figure="rounding",
)
"""3.14, as fixed in conf/experiment/lm_grad_sr_forward.yaml before it ran."""

GRAD_SR_BLOCKS = Preregistered(
    title="3.15 NVFP4's edge over the best MXFP4 recipe is its scale format, not its block size "
    "(pre-registered)",
    why=(
        "3.14 left the best MXFP4 recipe of 3.13 (floor on weights and activations, ceil on the "
        "gradients, the gradients rounded stochastically) 0.0068 behind NVFP4 with SR gradients. It "
        "differs from NVFP4 in its blocks (32, not 16) and its scales (powers of two, not UE4M3 under a "
        "per-tensor scale). On the trained tensors (270 bf16 runs of 3.9 and 3.11–3.14, each operand "
        "under the rule the recipe trains it with) NVFP4's MSE is ×0.60 the recipe's at 32, ×0.62 at 16 "
        "and ×0.64 at 8: finer E8M0 blocks do not close it. The flushed share does close: ×0.73, ×0.85, "
        "×1.06 (at 8 the recipe flushes less). From 32 to 16 the recipe's flushed share falls by 15 % and "
        "its gradients' MSE by 12 %. The hypothesis: finer blocks help the recipe, but NVFP4's edge is "
        "its finer scale grid, which it keeps at its own block size and at half of it, where the MSE "
        "(the index that decided 3.9's C4) and the flushed share disagree. The recipe in blocks of 8, 16 "
        "and 32 beside NVFP4, every run's gradients stochastic. Tests as in 3.2."
    ),
    preset="lm_grad_sr_blocks",
    predictions=(
        Prediction("Z1", "mxfp4_e2m1_gceil_sr", "mxfp4_e2m1_bs16_gceil_sr"),
        Prediction("Z2", "mxfp4_e2m1_bs16_gceil_sr", "nvfp4_sr"),
        Prediction("Z3", "mxfp4_e2m1_bs8_gceil_sr", "nvfp4_sr"),
        Prediction("16 → 8", "mxfp4_e2m1_bs16_gceil_sr", "mxfp4_e2m1_bs8_gceil_sr", measured=True),
        Prediction("at 32", "mxfp4_e2m1_gceil_sr", "nvfp4_sr", measured=True),
    ),
    decide=("Z1", "Z2", "Z3"),
    first="Z2",
    contrast="Measured beside them: 16 → 8, the recipe's step from blocks of 16 to 8; at 32, the recipe "
    "in blocks of 32 against NVFP4 (3.14's measured row on fresh seeds).",
    price="tensors",
    figure="rounding",
)
"""3.15, as fixed in conf/experiment/lm_grad_sr_blocks.yaml before it ran."""

GRAD_SR_EQUIV = Preregistered(
    title="3.16 With stochastically rounded gradients the best MXFP4 recipe trains as NVFP4 does "
    "(pre-registered)",
    why=(
        "Two sweeps measured 3.13's recipe (E2M1 in blocks of 32 under E8M0 scales, floor on weights and "
        "activations, ceil on the gradients, the gradients rounded stochastically) against NVFP4 with SR "
        "gradients and disagreed in sign: +0.0068 in 3.14 (90 % CI [+0.0024, +0.0111]), −0.0058 in 3.15 "
        "([−0.0117, −0.0000]). Each interval excluded 0 on its own side while neither gap was significant "
        "over the per-seed means (p = 0.17, 0.35); over the 12 seeds together the per-seed mean gap is "
        "+0.0006 (90 % CI [−0.0065, +0.0076]). 3.15 also found the recipe at blocks of 16 and 8 below "
        "NVFP4, whose trained tensors' MSE is ×0.60–0.64 of the recipe's. The hypothesis: the recipe and "
        "NVFP4 train alike, within the ±0.0075 margin of 3.10 and 3.14. The two beside bf16 on 8 fresh "
        "seeds. Tests as in 3.2; at 8 seeds the stricter check over the seed means is about ±0.009 wide, "
        "more than the margin, so it cannot show equivalence here."
    ),
    preset="lm_grad_sr_equiv",
    predictions=(Prediction("Q1", "mxfp4_e2m1_gceil_sr", "nvfp4_sr", 0.0075),),
    decide=("Q1",),
    first="Q1",
    contrast="Δ vs bf16 of each is in the table below.",
    price="tensors",
    figure="rounding",
)
"""3.16, as fixed in conf/experiment/lm_grad_sr_equiv.yaml before it ran."""


def _num(value: float, spec: str) -> str:
    """``value`` formatted, or "–" where it is NaN (no pairs yet)."""
    return "–" if pd.isna(value) else format(value, spec)


def _judge(h: Prediction, c: dict[str, Any]) -> tuple[str, bool, float, float]:
    """(the prediction in words, whether it held, the p the rule reads, the same over seed means) for
    ``h`` from its ``lmstudy.contrast``."""
    if h.measured:  # no direction was predicted: two-sided, and nothing to hold
        return (
            f"{h.worse} − {h.better} (measured, no prediction)",
            False,
            c["p_two_sided"],
            c["p_seeds_two_sided"],
        )
    if h.margin is not None:
        claim, p = f"{h.worse} ≡ {h.better} (±{h.margin:g})", c["p_equivalent"]
    elif h.minus is not None:
        claim, p = f"{h.worse} − {h.better} exceeds {h.minus[0]} − {h.minus[1]}", c["p_greater"]
    else:
        claim, p = f"{h.worse} worse than {h.better}", c["p_greater"]
    return claim, bool(p < ALPHA), p, c["p_seeds"]


def _block_errors(df: pd.DataFrame) -> dict[str, float]:
    """Each plain block format's closed-form error (``blocksize.theory.format_error``), by label: its
    element format (or recipe) as recorded, under the run's own E8M0 scale rule."""
    from analysis import lmstudy
    from analysis.blocksize.theory import format_error

    info = lmstudy.label_info(df)
    rules = df.groupby("label")["precision.scale_rule"].first() if "precision.scale_rule" in df else {}
    rounding = (
        df.groupby("label")["precision.grad_rounding"].first() if "precision.grad_rounding" in df else {}
    )
    out = {}
    for label, r in info.iterrows():
        stochastic = str(rounding.get(label)) == "stochastic"  # the closed form rounds to nearest
        if r["hybrid"] or r["w"] != r["a"] or stochastic:
            continue
        try:
            out[str(label)] = format_error(str(r["w"]), scale_rule=rules.get(label) or None)
        except ValueError:  # element-wise (bf16)
            continue
    return out


def preregistered_section(
    doc: _Doc, spec: Preregistered, confirm: Source, explore: Source | None = None
) -> None:
    """A pre-registered claim: each prediction on ``confirm``'s fresh seeds (the verdict) and, where
    it has the formats, on ``explore`` (the sample the predictions came from), then Δ vs bf16 of every
    plain block format beside its error and the figure (``Preregistered.price``, ``.figure``)."""
    from analysis import lmstudy

    if not confirm.ran:
        doc.claim(spec.title, NOT_RUN, spec.rule(), confirm)
        return
    samples = [(s, lmstudy.label_column(s.df)) for s in (explore, confirm) if s is not None and s.ran]
    seeds = {id(s): _seed_list(sorted(df["train.seed"].dropna().astype(int).unique())) for s, df in samples}
    names = {id(s): f"{s.name} (seeds {seeds[id(s)]})" for s, _ in samples}
    price = PRICES[spec.price]
    errors = {k: v for _, df in samples for k, v in price.errors(df).items()}
    rows, held, held_seeds, even = [], {}, {}, []
    for h in spec.predictions:
        for s, df in samples:
            c = lmstudy.contrast(df, h.worse, h.better, margin=h.margin, minus=h.minus)
            if s is not confirm and not c["n_pairs"]:
                continue  # the exploratory sample lacks one of the formats
            claim, ok, p, p_seeds = _judge(h, c)
            # a gap of gaps has no one error ratio
            ratio = errors.get(h.worse, np.nan) / errors.get(h.better, np.nan) if h.minus is None else np.nan
            if s is confirm and not h.measured:
                held[h.name] = ok
                held_seeds[h.name] = bool(p_seeds < ALPHA)
                if abs(ratio - 1) < 0.05 and c["n_pairs"]:
                    lo, hi = c["ci90"]
                    even.append(f"{h.name} {c['mean']:+.4f} [{_num(lo, '+.4f')}, {_num(hi, '+.4f')}]")
            rows.append(
                {
                    "": h.name,
                    "prediction": claim,
                    "error ratio": _num(ratio, ".2f"),
                    "sample": names[id(s)],
                    "pairs": c["n_pairs"],
                    "Δ (mean ± sd over pairs)": f"{_num(c['mean'], '+.4f')} ± {_num(c['sd'], '.4f')}",
                    "90 % CI": f"[{_num(c['ci90'][0], '+.4f')}, {_num(c['ci90'][1], '+.4f')}]",
                    "seeds with Δ > 0": f"{c['seeds_above']} of {c['seeds']}",
                    "p": _num(p, ".2g"),
                    "p (seed means)": _num(p_seeds, ".2g"),
                    "holds": "–" if h.measured else "yes" if ok else "no",
                }
            )
    doc.claim(spec.title, spec.verdict(held), spec.rule(seeds[id(confirm)]), confirm)
    left = confirm.asked - int(confirm.df["status"].isin(FINISHED).sum())
    if left > 0:
        doc.add(f"{left} of the {confirm.asked} runs of `{confirm.name}` have not finished yet: the verdict "
                "is on those that have.", "")  # fmt: skip
    doc.add(
        "Each prediction on the fresh seeds (the test)"
        + (" and on the sample it came from (exploratory)" if len(samples) > 1 else "")
        + f"; error ratio: the first format's {price.words} over the second's; p: the "
        "rule's test over the matched runs (two-sided for a measured row); p (seed means): the same test "
        "over the per-seed mean Δ (runs of one seed share its initialisation and data order; a check, not "
        "the rule):",
        "",
        md_table(pd.DataFrame(rows)),
        "",
    )
    doc.add(_unstable(samples[-1][1]), "")
    failed = [h for h, ok in held.items() if not ok]
    doc.add(
        f"On the fresh seeds: {', '.join(h for h, ok in held.items() if ok) or 'none'} held"
        + (f"; {', '.join(failed)} did not." if failed else ".")
        + f" {spec.contrast}",
        "",
        _seed_check(spec, held, held_seeds),
        "",
    )
    if even:
        doc.add(
            f"Where the two formats' {price.words} are within 5 % of each other the model predicts a "
            f"gap near 0; measured (Δ [90 % CI]): {'; '.join(even)}.",
            "",
        )
    FIGURES[spec.figure](doc, spec, samples, names, errors)
    _tensor_errors(doc, confirm, spec.compare, spec.metrics)


def _seed_check(spec: Preregistered, held: dict[str, bool], held_seeds: dict[str, bool]) -> str:
    """A sentence: the verdict again with each prediction judged over the per-seed mean Δ (the stricter
    check: the rule's test counts a seed's runs as independent pairs, though they share its
    initialisation and data order, so a seed that runs well in every budget can carry a pair-level
    result that a fresh set of seeds does not repeat)."""
    if held_seeds == held:
        return "Over the per-seed mean Δ (the stricter check) the same predictions hold."
    ok = ", ".join(h for h, k in held_seeds.items() if k) or "none"
    changed = ", ".join(h for h in held if held[h] != held_seeds[h])
    return (
        f"Over the per-seed mean Δ (the stricter check) {ok} held ({changed} changed): the verdict there "
        f"would be {spec.verdict(held_seeds)}."
    )


def _unstable(df: pd.DataFrame) -> str:
    """A sentence: how many finished runs of each label were unstable (diverged, or spiked and did not
    recover: ``collect``'s rule), which every Δ leaves out; a format that loses many pays more than its
    Δ says."""
    from analysis import lmstudy

    if "unstable" not in df or "status" not in df:  # records collect did not read: nothing to count
        return "Which runs were unstable is not on record."
    counts = instability_map(df, "label", None).set_index("label")
    counts = counts.loc[[x for x in lmstudy.label_info(df).index if x in counts.index]]  # display order
    flagged = [
        f"{label} {int(r['n_unstable'])} of {int(r['n'])}"
        for label, r in counts.iterrows()
        if r["n_unstable"] > 0
    ]
    if not flagged:
        return "No finished run was unstable."
    rest = "none of the others" if len(flagged) < len(counts) else "every format lost some"
    return (
        "Runs left out of every Δ as unstable (diverged, or a loss spike the run did not recover from): "
        f"{', '.join(flagged)}; {rest}."
    )


def _format_error_figure(
    doc: _Doc, spec: Preregistered, samples: list[tuple[Source, pd.DataFrame]], names: dict[int, str],
    errors: dict[str, float],
) -> None:  # fmt: skip
    """Δ vs bf16 of every plain block format in the order of its error, each sample a column, and the
    figure of Δ against the error (marker: bits per element)."""
    from analysis import lmstudy, plots

    points = []
    for s, df in samples:
        ref = lmstudy.reference_label(df["label"].unique())
        if ref is None:
            continue
        info = lmstudy.label_info(df)
        for r in lmstudy.deltas_vs_reference(df, reference=ref).itertuples(index=False):
            if str(r.label) not in errors:
                continue
            points.append(
                {
                    "label": r.label,
                    "bits": lmstudy.element_bits(info.loc[r.label, "w"]),
                    "error": errors[str(r.label)],
                    "sample": names[id(s)],
                    "mean": r.mean_over_seeds,
                    "sd": r.sd_over_seeds,
                }
            )
    pts = pd.DataFrame(points, columns=["label", "bits", "error", "sample", "mean", "sd"])
    if not pts.empty:  # (a sweep without bf16 has no Δ vs bf16: no table, no figure)
        cells = pts.assign(
            cell=[f"{m:+.4f} ± {sd:.4f}" for m, sd in zip(pts["mean"], pts["sd"], strict=True)]
        )
        keys = ["label", "bits", "error"]
        wide = cells.pivot_table(index=keys, columns="sample", values="cell", aggfunc="first", sort=False)
        wide = wide.reset_index().sort_values("error", kind="stable")
        wide = wide.assign(bits=wide["bits"].astype(int), error=[f"{e:.3e}" for e in wide["error"]]).fillna(
            "–"
        )
        wide.columns.name = None
        doc.add(
            "Δ vs bf16 (mean ± sd over seeds) of every plain block format, in the order of its closed-form "
            "error:",
            "",
            md_table(wide.rename(columns={"error": "relative MSE (closed form)"})),
            "",
        )
        caption = "Δ vs bf16 against the format's quantization error"
        doc.figure(plots.format_error_plot(pts), f"{spec.preset}.png", caption)


TENSOR_METRICS = {
    "rel_mse": ("MSE", ".3g", "MSE relative to ‖t‖²"),
    "flushed": ("flushed", ".3f", "flushed: the fraction of nonzero values quantized to 0"),
    "norm": ("norm", ".3f", "norm: ‖Q(t)‖/‖t‖, below 1 where the quantizer shrinks the tensor"),
}
"""``train.tensor_error``'s indices → (column heading, number format, what it is in words)."""


def _tensor_errors(
    doc: _Doc,
    src: Source,
    compare: tuple[str, str] | None = None,
    metrics: tuple[str, ...] = ("rel_mse", "flushed"),
) -> None:
    """The error of the trained models' own tensors (``train.tensor_error``'s rows in ``src``'s runs) by
    each of ``metrics``, beside the Gaussian closed form, for the formats and rules ``src`` trained, and
    the ``compare`` labels' ratio operand by operand; nothing without rows."""
    from analysis import lmstudy
    from analysis.blocksize.theory import format_error
    from quant.formats import ELEM_FORMATS

    df = lmstudy.label_column(src.df)
    table, runs = _tensor_table(df)
    if table.empty:
        return
    geometry = lmstudy.block_geometry(df)
    # each rule a run trained under, the gradients' own included
    trained = set(zip(geometry["name"], geometry["rule"], strict=True))
    trained |= set(zip(geometry["name"], geometry["grad_rule"], strict=True))
    table = table[[(f, r) in trained for f, r in zip(table["format"], table["rule"], strict=True)]]
    if table.empty:
        return
    operands = list(dict.fromkeys(c.split("/")[1] for c in table.columns if c.startswith("rel_mse/")))
    shown = pd.DataFrame({"format": table["format"], "rule": table["rule"]})
    # the closed form prices MX blocks (scale-free); a float scale's error depends on the tensor's size
    shown["Gaussian"] = [
        f"{format_error(f, scale_rule=r):.3g}" if f in ELEM_FORMATS else "–"
        for f, r in zip(table["format"], table["rule"], strict=True)
    ]
    for metric in metrics:
        heading, fmt, _ = TENSOR_METRICS[metric]
        for o in operands:
            shown[f"{heading} {o}"] = [_num(v, fmt) for v in table.get(f"{metric}/{o}", [])]
    lines = []
    for f, g in table.groupby("format", sort=False):
        if set(g["rule"]) >= {"floor", "ceil"}:
            floor, ceil = (g[g["rule"] == r].iloc[0] for r in ("floor", "ceil"))
            mse = [ceil[f"rel_mse/{o}"] / floor[f"rel_mse/{o}"] for o in operands]
            # a ratio of fractions under 0.5 % says little: those operands lose next to nothing either way
            flushed = [
                ceil[f"flushed/{o}"] / floor[f"flushed/{o}"]
                for o in operands
                if floor[f"flushed/{o}"] >= 0.005
            ]
            # the closed form prices MX blocks of 32 only (as the table's Gaussian column)
            gauss = (
                f" (Gaussian ×{format_error(f, scale_rule='ceil') / format_error(f, scale_rule='floor'):.3f})"
                if f in ELEM_FORMATS
                else ""
            )
            lines.append(
                f"{f}: MSE ×{min(mse):.2f}–{max(mse):.2f}{gauss}"
                + (f", flushed ×{min(flushed):.2f}–{max(flushed):.2f}" if flushed else ", flushed < 0.5 %")
            )
    doc.add(
        f"**The trained models' own tensors** (`python -m train.tensor_error {_rel(src.path)}`: {runs} bf16 "
        "runs' final weights, quantization off, one batch; each operand blocked along its GEMM's "
        "contraction: "
        "W and X along `in` (forward), X_T and dY_T along tokens (weight gradient), dY along `out` (data "
        "gradient); median over runs of the mean over the model's Linears; "
        + "; ".join(TENSOR_METRICS[m][2] for m in metrics)
        + "):",
        "",
        md_table(shown),
        "",
    )
    if lines:
        doc.add("Ceil over floor, across the operands: " + "; ".join(lines) + ".", "")
    rows = table.set_index(["format", "rule"])
    known = [label for label in compare or () if label in geometry.index]
    keys = [tuple(geometry.loc[label, ["name", "rule"]]) for label in known]
    if compare and len(keys) == 2 and all(k in rows.index for k in keys):
        num, den = (rows.loc[k] for k in keys)
        ratios = [
            f"{words} "
            + ", ".join(f"{o} ×{num[f'{metric}/{o}'] / den[f'{metric}/{o}']:.2f}" for o in operands)
            for metric, words in (("rel_mse", "MSE"), ("flushed", "flushed"))
        ]
        doc.add(
            f"{compare[0]} over {compare[1]} on these tensors, operand by operand: {'; '.join(ratios)}.", ""
        )


def _tensor_table(df: pd.DataFrame) -> tuple[pd.DataFrame, int]:
    """(``lmstudy.tensor_error_table`` of the runs of ``df`` that ``train.tensor_error`` measured, how
    many runs that is); (empty, 0) where none was. Read once per sweep: the error-ratio column and the
    tensor table of a section ask for the same files."""
    if "path" not in df:
        return pd.DataFrame(), 0
    files = []  # (run, file, its mtime): a file rewritten since is read again
    once = df.drop_duplicates("path")  # each run directory once
    for run, path in zip(once["run"], once["path"], strict=True):
        f = Path(path) / TENSOR_ERROR
        if f.exists():
            files.append((run, str(f), f.stat().st_mtime_ns))
    return _read_tensor_table(tuple(files))


@functools.lru_cache(maxsize=4)
def _read_tensor_table(files: tuple[tuple[str, str, int], ...]) -> tuple[pd.DataFrame, int]:
    """``_tensor_table`` of (run, file, mtime) (hashable, so the read is cached; callers only filter the
    frame, never change it in place)."""
    from analysis import lmstudy
    from analysis.collect import read_metrics

    rows = [{"run": run, **row} for run, f, _ in files for row in read_metrics(Path(f))]
    return lmstudy.tensor_error_table(pd.DataFrame(rows)), len(rows)


def _tensor_block_errors(df: pd.DataFrame) -> dict[str, float]:
    """Each plain block format's relative MSE on the trained models' own tensors, by label: the mean over
    the five operands of the median over the sweep's measured runs (``train.tensor_error``'s rows) of
    the format's geometry; empty where no run was measured."""
    from analysis import lmstudy

    table, _ = _tensor_table(df)
    if table.empty:
        return {}
    mse = [c for c in table.columns if c.startswith("rel_mse/")]
    by = table.set_index(["format", "rule"])[mse].mean(axis=1)
    return {
        str(label): float(by[(g["name"], g["rule"])])
        for label, g in lmstudy.block_geometry(df).iterrows()
        # the tensors were rounded to nearest under one rule: a run with stochastic gradients, or its
        # gradients under another rule, has no price there
        if (g["name"], g["rule"]) in by.index
        and g["grad_rounding"] != "stochastic"
        and g["grad_rule"] == g["rule"]
    }


def _block_size_figure(
    doc: _Doc, spec: Preregistered, samples: list[tuple[Source, pd.DataFrame]], names: dict[int, str],
    errors: dict[str, float],
) -> None:  # fmt: skip
    """Study 2's view in training: Δ vs bf16 (mean ± sd over seeds) against the block size, one line per
    block-scale family, on the fresh seeds; a table of the same beside each format's tensor error, and
    finer − coarsest per model shape (where the gradients' size, and so the inversion, differs)."""
    from analysis import lmstudy, plots

    source, df = samples[-1]
    ref, pts = _family_deltas(df)
    if pts.empty:
        return
    pts = pts.assign(error=[errors.get(label, np.nan) for label in pts["label"]])
    pts = _by_family(pts, "block")  # blocks up
    shown = pts.assign(
        **{
            f"Δ vs {ref} (mean ± sd over seeds)": [
                f"{m:+.4f} ± {sd:.4f}" for m, sd in zip(pts["mean"], pts["sd"], strict=True)
            ],
            "relative MSE (own tensors)": [_num(e, ".4f") for e in pts["error"]],
        }
    ).drop(columns=["elem", "grads", "mean", "sd", "error"])
    doc.add(
        f"Δ vs {ref} on {names[id(source)]} by block-scale family and block size, beside the relative MSE "
        "of the format on the bf16 runs' own tensors (mean over the five operands):",
        "",
        md_table(shown),
        "",
    )
    shape = [c for c in ("model.depth", "model.d_model") if c in df]
    lines = []
    for family, g in pts.groupby("family", sort=False):
        if g["block"].nunique() < 2:
            continue
        fine, coarse = (g.sort_values("block").iloc[i]["label"] for i in (0, -1))
        for key, sub in df.groupby(shape, sort=True) if shape else []:
            c = lmstudy.contrast(sub, fine, coarse)
            if c["n_pairs"]:
                depth, width = key
                lo, hi = c["ci90"]
                lines.append(
                    {
                        "family": family,
                        "contrast": f"{fine} − {coarse}",
                        "shape": f"d{int(width)}L{int(depth)}",
                    }
                    | {"pairs": c["n_pairs"], "Δ (mean ± sd over pairs)": f"{c['mean']:+.4f} ± {c['sd']:.4f}"}
                    | {"90 % CI": f"[{_num(lo, '+.4f')}, {_num(hi, '+.4f')}]"}
                )
    if lines:
        doc.add(
            "Finest minus coarsest blocks per model shape (exploratory: the shapes' gradients differ in "
            "size, and the inversion with them):",
            "",
            md_table(pd.DataFrame(lines)),
            "",
        )
    caption = "Δ vs bf16 against the block size, one line per block-scale family"
    doc.figure(plots.block_size_training_plot(pts, reference=ref), f"{spec.preset}.png", caption)


def _family(g: pd.Series) -> str:
    """A block geometry's scale family in words (a row of ``lmstudy.block_geometry``), naming the scale
    rule where it is not OCP's floor, and the gradients' where it is not the family's."""
    scale = str(g["scale"]).upper()
    family = f"{scale} + per-tensor scale" if g["global_scale"] else f"{scale} alone"
    family = family if str(g["rule"]) == "floor" else f"{family}, {g['rule']} rule"
    grads = str(g.get("grad_rule", g["rule"]))
    return family if grads == str(g["rule"]) else f"{family}, {grads} rule on the gradients"


def _family_deltas(df: pd.DataFrame, *, gradients: bool = False) -> tuple[str | None, pd.DataFrame]:
    """(the reference label, one row per block format of ``df`` with matched runs: its family in words,
    block, label, elem, grads and Δ vs the reference as mean and sd over seeds); no rows without a
    reference. ``gradients``: as ``lmstudy.block_geometry``'s."""
    from analysis import lmstudy

    cols = ["family", "block", "label", "elem", "grads", "mean", "sd"]
    ref = lmstudy.reference_label(df["label"].unique())
    geometry = lmstudy.block_geometry(df, gradients=gradients)
    if ref is None or geometry.empty:
        return ref, pd.DataFrame(columns=cols)
    deltas = lmstudy.deltas_vs_reference(df, reference=ref).set_index("label")
    # families in one order whatever the labels: by scale format, each with its per-tensor scale first,
    # then OCP's floor rule before another
    geometry = geometry.assign(other_rule=geometry["rule"].ne("floor")).sort_values(
        ["scale", "global_scale", "other_rule"], ascending=[True, False, True], kind="stable"
    )
    rows = [
        (_family(g), int(g["block_size"]), label, g["elem"], g["grads"])
        + (deltas.loc[label, "mean_over_seeds"], deltas.loc[label, "sd_over_seeds"])
        for label, g in geometry.iterrows()
        if label in deltas.index
    ]
    return ref, pd.DataFrame(rows, columns=cols)


def _by_family(pts: pd.DataFrame, then: str, ascending: bool = True) -> pd.DataFrame:
    """``pts`` ordered by family as first met, then by ``then``."""
    order = {f: i for i, f in enumerate(dict.fromkeys(pts["family"]))}
    return pts.sort_values(
        ["family", then], ascending=[True, ascending], key=lambda c: c.map(order) if c.name == "family" else c
    )


def _gradients_figure(
    doc: _Doc, spec: Preregistered, samples: list[tuple[Source, pd.DataFrame]], names: dict[int, str],
    errors: dict[str, float],
) -> None:  # fmt: skip
    """Where each block-scale family's cost lies: Δ vs bf16 (mean ± sd over seeds) of each family with
    its incoming gradient in the family's own block format and kept in high precision, on the fresh
    seeds; a table, the share of each family's Δ that the gradients carry, and the figure."""
    from analysis import plots

    source, df = samples[-1]
    ref, pts = _family_deltas(df, gradients=True)
    if pts.empty:
        return
    own = pts["grads"] == pts["elem"]
    pts = pts.assign(own=own, gradients=np.where(own, pts["elem"] + " (the family's)", pts["grads"]))
    pts = _by_family(pts, "own", ascending=False)  # the family's own gradients first
    cells = [f"{m:+.4f} ± {sd:.4f}" for m, sd in zip(pts["mean"], pts["sd"], strict=True)]
    shown = pts.assign(**{f"Δ vs {ref} (mean ± sd over seeds)": cells})
    shown = shown[["family", "block", "label", "gradients", f"Δ vs {ref} (mean ± sd over seeds)"]]
    doc.add(
        f"Δ vs {ref} on {names[id(source)]} by block-scale family, the incoming gradient in the family's "
        "own format or not:",
        "",
        md_table(shown),
        "",
    )
    shares = []
    for family, g in pts.groupby("family", sort=False):
        mine, other = g[g["own"]], g[~g["own"]]
        if len(mine) == 1 and len(other) == 1 and mine["mean"].iloc[0] > 0:
            full, kept = mine["mean"].iloc[0], other["mean"].iloc[0]
            shares.append(
                f"{family} {100 * (full - kept) / full:.0f} % ({full:+.4f} → {kept:+.4f} with the gradients "
                f"in {other['gradients'].iloc[0]})"
            )
    if shares:
        doc.add(f"The share of each family's Δ vs {ref} that its gradients carry: {'; '.join(shares)}.", "")
    caption = "Δ vs bf16 by block-scale family, the gradients in the family's format or in bf16"
    doc.figure(plots.gradient_format_plot(pts, reference=ref), f"{spec.preset}.png", caption)


def _rounding_figure(
    doc: _Doc, spec: Preregistered, samples: list[tuple[Source, pd.DataFrame]], names: dict[int, str],
    errors: dict[str, float],
) -> None:  # fmt: skip
    """Where stochastic rounding of the gradients helps: Δ vs bf16 (mean ± sd over seeds) of each block
    format (family and block size) with its gradients rounded to nearest and stochastically, on the fresh
    seeds; a table, SR's effect per format where both were trained, and the figure."""
    from analysis import lmstudy, plots

    source, df = samples[-1]
    ref, pts = _family_deltas(df)
    if pts.empty:
        return
    rounding = lmstudy.block_geometry(df)["grad_rounding"]
    # each scale family together, its coarsest blocks first (where 3.4 found SR's gain)
    order = {f: i for i, f in enumerate(dict.fromkeys(pts["family"]))}
    pts = pts.assign(rank=pts["family"].map(order)).sort_values(["rank", "block"], ascending=[True, False])
    pts = pts.drop(columns="rank")
    sr = np.array([rounding.get(label) == "stochastic" for label in pts["label"]])
    pts = pts.assign(
        family=[f"{f}, blocks of {b}" for f, b in zip(pts["family"], pts["block"], strict=True)],
        own=~sr,  # the plot's first kind: rounded to nearest, as every other role
        gradients=np.where(sr, "stochastic", "to nearest"),
    )
    pts = _by_family(pts, "own", ascending=False)  # to nearest first
    cells = [f"{m:+.4f} ± {sd:.4f}" for m, sd in zip(pts["mean"], pts["sd"], strict=True)]
    shown = pts.assign(**{"gradients rounded": pts["gradients"], f"Δ vs {ref} (mean ± sd over seeds)": cells})
    shown = shown[["family", "label", "gradients rounded", f"Δ vs {ref} (mean ± sd over seeds)"]]
    doc.add(
        f"Δ vs {ref} on {names[id(source)]} by block format, the gradients rounded to nearest or "
        "stochastically:",
        "",
        md_table(shown),
        "",
    )
    effects = []
    for family, g in pts.groupby("family", sort=False):
        near, stoch = g[g["own"]], g[~g["own"]]
        if len(near) == 1 and len(stoch) == 1:
            c = lmstudy.contrast(df, stoch["label"].iloc[0], near["label"].iloc[0])
            if c["n_pairs"]:
                lo, hi = c["ci90"]
                effects.append(f"{family} {c['mean']:+.4f} [{_num(lo, '+.4f')}, {_num(hi, '+.4f')}]")
    if effects:
        doc.add(
            "Stochastic minus nearest gradients, matched runs (Δ [90 % CI]; above 0: SR costs): "
            + "; ".join(effects) + ".",
            "",
        )  # fmt: skip
    caption = "Δ vs bf16 by block format, the gradients rounded to nearest or stochastically"
    fig = plots.gradient_format_plot(
        pts,
        reference=ref,
        kinds=("gradients rounded to nearest", "gradients rounded stochastically"),
        title="Stochastic rounding of the gradients: where does it help?"
        if pts["own"].nunique() == 2
        else "Each format with its gradients rounded stochastically"
        if sr.all()
        else "Each format with its gradients rounded to nearest",
        xlabel="FP4 E2M1 block format",
    )
    doc.figure(fig, f"{spec.preset}.png", caption)


@dataclass(frozen=True)
class Price:
    """How a section prices each format (``Preregistered.price``): by label, and the words for it."""

    errors: Callable[[pd.DataFrame], dict[str, float]]
    words: str


PRICES = {
    "closed_form": Price(_block_errors, "closed-form MSE (round to nearest)"),
    "tensors": Price(_tensor_block_errors, "relative MSE on the bf16 runs' own tensors (mean over operands)"),
}
"""``Preregistered.price`` → how its error ratios are computed."""

FIGURES = {
    "format_error": _format_error_figure,
    "block_size": _block_size_figure,
    "gradients": _gradients_figure,
    "rounding": _rounding_figure,
}
"""``Preregistered.figure`` → the section's Δ-vs-bf16 table and figure."""

PREREGISTERED = (
    FORMAT_ERROR,
    SCALE_RULE,
    GRAD_SR,
    BLOCK_SCALE,
    BLOCK_GRADS,
    BLOCK_GLOBAL,
    BLOCK_E8M0,
    BLOCK_CEIL,
    BLOCK_GRADS_FRESH,
    GRAD_SR_RECIPES,
    GRAD_SR_CLAMP,
    GRAD_SR_GCEIL,
    GRAD_SR_FORWARD,
    GRAD_SR_BLOCKS,
    GRAD_SR_EQUIV,
)
"""The pre-registered sections, in the document's order."""
