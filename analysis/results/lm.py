"""The LM sections: 1.5 (MX weights with bf16 activations, and forward-only MX, train like bf16),
1.6 (loss spikes in W × A sweeps at CPU scale) and 3.1 (one scaling law over all precisions, each
format's effective-parameter multiplier m_P; ``analysis.precision``), and the pre-registered follow-ups
of 1.5 and 1.6 in their shape (3.17 on: ``SpikeFollowUp``, whose predictions test stability by an exact
McNemar test over runs paired by seed and the loss by paired t and TOST). The other pre-registered
claims of our own (3.2–3.16) are in ``analysis.results.preregistered``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import numpy as np
import pandas as pd

from analysis.instability import FINISHED, instability_map, sci, si
from analysis.report import md_table
from analysis.results.common import NOT, NOT_RUN, PARTIAL, REPRODUCED, Source, _and, _cited, _Doc, _seed_list

FIXES_TITLE = "1.5 MX weights with bf16 activations, and forward-only MX, train like bf16 (LM)"


class LossTest(NamedTuple):
    """A pre-registered loss prediction on a one-shape LM sweep: ``worse`` ends above ``better``
    (one-sided paired t over runs matched by seed), or with a ``margin`` the two are equivalent within it
    (TOST); ``measured``: a contrast reported beside them, two-sided, with nothing to hold."""

    name: str
    worse: str
    better: str
    margin: float | None = None
    measured: bool = False
    lr: float | None = None
    """The LR whose runs it compares, where not its follow-up's ``loss_lr``."""


class PairTest(NamedTuple):
    """A pre-registered stability prediction: ``worse`` is unstable where ``better`` of the same (LR,
    seed) is not, more often than the reverse (exact one-sided McNemar over the discordant pairs)."""

    name: str
    worse: str
    better: str


def _all_some_none(held: dict[str, bool]) -> str:
    """The rule most claims here share: reproduced when every prediction holds, partially when some do,
    not when none does."""
    return REPRODUCED if all(held.values()) else PARTIAL if any(held.values()) else NOT


FIXES_PREDICTIONS = (
    LossTest("P1", "mxfp8_e4m3", "bf16"),
    LossTest("P2", "mxfp8_e4m3", "e4m3w-bf16a"),
    LossTest("P3", "mxfp8_e4m3", "e4m3-fwd"),
    LossTest("P4", "e4m3w-bf16a", "bf16", 0.02),
    LossTest("P5", "e4m3-fwd", "bf16", 0.02),
)
"""``lm_spikes_fixes``' predictions (its header)."""


def lm_claims(doc: _Doc, lm: Source, fixes: Source | None = None) -> None:
    """1.5: judged by ``lm_spikes_fixes``' pre-registered rule where that sweep ran (the fixes where
    full MX falls behind), else by the first look at ``lm_precisions`` (which follows the test)."""
    if fixes is not None and fixes.ran:
        _fixes_claim(doc, fixes)
        _first_look_fixes(doc, lm, claim=False)
    else:
        _first_look_fixes(doc, lm, claim=True)


def _fixes_claim(doc: _Doc, fixes: Source) -> None:
    from analysis import lmstudy

    rule = (
        "Rule (pre-registered in `lm_spikes_fixes`' header before it ran): at the LR and shape where "
        "`lm_spikes` (1.6) saw full MXFP8 E4M3 fall far behind bf16, bf16, full MX and the study's two fixes "
        "on fresh seeds. Δ = final val loss of the first − the second on runs matched by seed; every "
        "finished run with a finite loss counts, unstable or not (the instability is what the fixes are "
        "to avert); one-sided paired t-test, α = 0.05; equivalence by two one-sided tests (TOST) at "
        "±0.02. P1: full MX ends above bf16; P2: MX weights + bf16 activations end below full MX; P3: "
        "forward-only MX ends below full MX; P4, P5: each fix ≡ bf16 within ±0.02. Reproduced when P1–P5 "
        "all hold; not when none of P2–P5 holds; partially otherwise."
    )
    df = lmstudy.label_column(fixes.df)
    table, held = _loss_tests(df, FIXES_PREDICTIONS)
    fixes_held = [held[h.name] for h in FIXES_PREDICTIONS[1:]]
    verdict = REPRODUCED if all(held.values()) else NOT if not any(fixes_held) else PARTIAL
    doc.claim(FIXES_TITLE, verdict, rule, fixes)
    fin = df[df["status"].isin(FINISHED)]
    ref = lmstudy.reference_label(df["label"].unique()) or "bf16"
    doc.add(
        _setting_line(fin),
        "",
        md_table(table),
        "",
        "Each precision (every finished run; unstable as 1.6 counts it):",
        "",
        md_table(_outcomes(df, ref)),
        "",
    )
    _curves_figure(
        doc,
        fixes,
        fin,
        "lm_spikes_fixes_curves.png",
        f"Train loss and gradient norm at lr {_listed(_lrs(fin))}",
    )


def _loss_tests(df: pd.DataFrame, predictions: tuple[LossTest, ...]) -> tuple[pd.DataFrame, dict[str, bool]]:
    """``predictions`` on a labelled one-shape sweep. Every finished run with a finite loss counts,
    unstable or not (an unstable run is the effect, not noise). The table of tests, and which of the
    predictions (not the measured rows) held."""
    from analysis import lmstudy

    every = df.assign(unstable=False)
    rows, held = [], {}
    for h in predictions:
        c = lmstudy.contrast(every, h.worse, h.better, margin=h.margin)
        if h.measured:
            test, p = f"{h.worse} − {h.better} (measured)", c["p_two_sided"]
        elif h.margin:
            test, p = f"{h.worse} ≡ {h.better} (±{h.margin:g})", c["p_equivalent"]
        else:
            test, p = f"{h.worse} > {h.better}", c["p_greater"]
        if not h.measured:
            held[h.name] = bool(np.isfinite(p) and p < lmstudy.ALPHA)
        lo, hi = c["ci90"]
        rows.append(
            {
                "prediction": h.name,
                "test": test,
                "pairs": c["n_pairs"],
                "Δ (mean)": f"{c['mean']:+.4f}" if c["n_pairs"] else "–",
                "90 % CI": f"[{lo:+.4f}, {hi:+.4f}]" if np.isfinite(lo) else "–",
                "p": f"{p:.2g}" if np.isfinite(p) else "–",
                "held": "–" if h.measured else "yes" if held[h.name] else "no",
            }
        )
    return pd.DataFrame(rows), held


def _curves_figure(
    doc: _Doc, src: Source, df: pd.DataFrame, name: str, title: str, reference: str | None = None
) -> None:
    """``plots.training_curves_plot`` of ``src``'s logged curves, the runs of ``df`` (labelled) alone,
    in the tables' order (``reference`` first: bf16 where the sweep has it)."""
    from analysis import lmstudy, plots

    if src.cur.empty:
        return
    runs = df[["run", "label", "train.seed"]].rename(columns={"train.seed": "seed"})
    cur = src.cur.drop(columns=["label", "seed"], errors="ignore").merge(runs, on="run")
    labels = lmstudy.ordered_labels(lmstudy.label_info(df), reference)
    order = {label: i for i, label in enumerate(labels)}
    cur = cur.sort_values("label", key=lambda s: s.map(order), kind="stable")  # the tables' order
    doc.figure(
        plots.training_curves_plot(cur[["label", "seed", "step", "loss", "grad_norm"]], title), name, title
    )


def _first_look_fixes(doc: _Doc, lm: Source, claim: bool) -> None:
    """``lm_precisions``' Δ vs bf16 at its one LR: 1.5's verdict where ``lm_spikes_fixes`` has not run
    (the rule below), else the first look the test followed."""
    from analysis import lmstudy

    title = FIXES_TITLE
    rule = (
        "Rule: Δ = final val loss − bf16's on matched runs (same budget, shape and seed), mean ± sd over "
        "seeds; significant when a paired t-test over the matched runs gives p < 0.05. Reproduced when the "
        "hybrid (E4M3 weights, bf16 activations) is not significantly worse than bf16 while full MXFP8 "
        "E4M3 is (partially when both are within noise: untestable at this scale); forward-only MX (E4M3 "
        "forward, high-precision backward) is judged the same way and must hold too."
    )
    if not lm.ran:
        if claim:
            doc.claim(title, NOT_RUN, rule, lm)
        return
    df = lmstudy.label_column(lm.df)
    ref = lmstudy.reference_label(df["label"].unique())
    deltas = lmstudy.deltas_vs_reference(df, reference=ref) if ref else pd.DataFrame()
    if deltas.empty:
        if claim:
            doc.claim(title, NOT, rule + " (no bf16 runs to compare against)", lm)
        return
    d = deltas.set_index("label")
    full = d.loc["mxfp8_e4m3"] if "mxfp8_e4m3" in d.index else None
    fixes = [d.loc[k] for k in ("e4m3w-bf16a", "e4m3-fwd") if k in d.index]
    fine = [not bool(f["significant"]) for f in fixes]
    if full is None or not fixes:
        verdict = NOT_RUN
    elif all(fine) and bool(full["significant"]) and full["mean_delta"] > 0:
        verdict = REPRODUCED
    elif any(fine):
        verdict = PARTIAL
    else:
        verdict = NOT
    if claim:
        doc.claim(title, verdict, rule, lm)
    else:
        doc.add(_first_look_line(lm, df), "")
    largest = lmstudy.deltas_vs_reference(df, reference=ref, budget="largest")
    doc.add(
        "Δ vs bf16 over all budgets and at each format's largest budget (mean ± sd over seeds of the "
        "per-seed mean Δ; p: paired over matched runs, not corrected for the number of formats):",
        "",
        md_table(lmstudy.display_deltas(deltas, largest)),
        "",
        *[f"- {line}" for line in lmstudy.verdict(deltas, ref)],
        "",
    )
    from analysis import plots

    doc.figure(plots.delta_heatmap(deltas, reference=ref), "lm_delta_heatmap.png", "Δ loss vs bf16, W × A")


SPIKES_TITLE = "1.6 Sharp loss spikes in MX W × A sweeps (LM, CPU scale)"
SPIKES_PREDICTIONS = (PairTest("U1", "mxfp8_e5m2", "bf16"), PairTest("U2", "mxfp8_e4m3", "bf16"))
"""``lm_spikes``' predictions (its header): each format unstable where bf16 of the same (LR, seed) is
not, more often than the reverse (exact one-sided McNemar, p < 0.05)."""
ABOVE_BEST = 0.008
"""A run that ended this far above its own best val loss ended worse than it had been (the study's
"improvement" < 0): the spike detector's threshold, so noise of one eval does not count."""


def spikes_claim(
    doc: _Doc, lm: Source, spikes: Source, pilot: Source | None = None, clamp: Source | None = None
) -> None:
    """1.6: judged by ``lm_spikes``' pre-registered rule where that LR scan ran, else by the first look
    at ``lm_precisions``' single LR; the first look's table follows the scan's. ``pilot``: the bf16-only
    LR scan the rule's LRs were chosen from (``lm_spikes_pilot``), one line of its outcomes. ``clamp``:
    ``lm_spikes_clamp``, what averts the blow-up (its predictions reported on their own)."""
    from analysis import lmstudy

    if not spikes.ran:
        _spikes_first_look(doc, lm, claim=True)
        return
    rule = (
        "Rule (pre-registered in `lm_spikes`' header before any of its MX runs trained): an LR scan of one "
        "shape trained long, at bf16's best LR and 10× and 100× it (chosen by the bf16-only pilot "
        "`lm_spikes_pilot`), on fresh seeds. A run is unstable "
        "when it diverged or a loss spike (the 100-step mean train loss rising 0.008 above its running "
        "minimum: the study's notebook's detector) was not recovered from. U1: MXFP8 E5M2 is unstable "
        "where bf16 of the same (LR, seed) is not more often than the reverse (exact one-sided McNemar "
        "over the discordant pairs, p < 0.05); U2: the same for MXFP8 E4M3. Reproduced when both hold, "
        "partially when one does, not when neither does. The study saw its spikes at ≥ 10⁸ parameters."
    )
    df = lmstudy.label_column(spikes.df)
    ref = lmstudy.reference_label(df["label"].unique())
    if ref is None:
        doc.claim(SPIKES_TITLE, NOT, rule + " (no bf16 runs to compare against)", spikes)
        return
    pairs, held = _stability_tests(df, tuple(h._replace(better=ref) for h in SPIKES_PREDICTIONS))
    doc.claim(SPIKES_TITLE, _all_some_none(held), rule, spikes)
    fin = df[df["status"].isin(FINISHED)]
    doc.add(
        _setting_line(fin),
        "",
        *_pilot_line(pilot),
        "Unstable runs paired by (LR, seed) against bf16 (the rule's test):",
        "",
        md_table(pairs),
        "",
        "Each LR (final val loss and Δ vs bf16 over every finished run, unstable ones included; Δ on runs "
        f"of that LR matched by seed; a run that ended ≥ {ABOVE_BEST:g} above its own best val loss ended "
        "worse than it had been):",
        "",
        md_table(_outcomes(df, ref)),
        "",
    )
    from analysis import plots

    points = fin.assign(lr=pd.to_numeric(fin["train.lr"], errors="coerce"), seed=fin["train.seed"])
    doc.figure(
        plots.lr_scan_plot(points[["label", "lr", "seed", "final_val_loss", "unstable"]], reference=ref),
        "lm_spikes_lr.png",
        "Final val loss against the LR, every precision on one axis",
    )
    own = points[points["label"] == ref]
    best = own.groupby("lr")["final_val_loss"].mean().idxmin() if not own.empty else None
    if best is not None:  # how the runs trained at bf16's best LR of the scan
        _curves_figure(
            doc, spikes, points[np.isclose(points["lr"], best)], "lm_spikes_curves.png",
            f"Train loss and gradient norm at lr {best:g} ({ref}'s best of the scan)",
        )  # fmt: skip
    if clamp is not None and clamp.ran:
        _clamp_block(doc, clamp)
    _spikes_first_look(doc, lm, claim=False)


def _first_look_line(lm: Source, df: pd.DataFrame) -> str:
    lrs = _listed(_lrs(df[df["status"].isin(FINISHED)]))
    return f"The first look, at one LR ({lrs}): {_cited(lm)}."


CLAMP_PREDICTIONS = (
    PairTest("K1", "mxfp8_e4m3", "bf16"),
    PairTest("K2", "mxfp8_e4m3", "mxfp8_e4m3_ceil"),
    PairTest("K3", "mxfp8_e4m3", "e4m3w-bf16a"),
    PairTest("K4", "mxfp8_e4m3", "e4m3-fwd"),
)
"""``lm_spikes_clamp``' predictions (its header), each reported on its own."""


def _stability_tests(
    df: pd.DataFrame, predictions: tuple[PairTest, ...]
) -> tuple[pd.DataFrame, dict[str, bool]]:
    """``predictions`` on a labelled sweep (``lmstudy.unstable_pairs``; runs paired by LR and seed): the
    paired table (each prediction's two precisions, the four cells, the one-sided p, whether it held),
    and which held. The twin of ``_loss_tests``."""
    from analysis import lmstudy

    rows, held = [], {}
    for h in predictions:
        t = lmstudy.unstable_pairs(df, h.worse, h.better)
        held[h.name] = bool(t["n_pairs"] > 0 and t["p_greater"] < lmstudy.ALPHA)
        rows.append(
            {
                "prediction": h.name,
                "unstable": h.worse,
                "where not": h.better,
                "pairs": t["n_pairs"],
                "both unstable": t["both"],
                "first alone": t["only"],
                "second alone": t["only_reference"],
                "neither": t["neither"],
                "p (one-sided)": f"{t['p_greater']:.2g}",
                "held": "yes" if held[h.name] else "no",
            }
        )
    return pd.DataFrame(rows), held


def _clamp_block(doc: _Doc, clamp: Source) -> None:
    from analysis import lmstudy

    df = lmstudy.label_column(clamp.df)
    ref = lmstudy.reference_label(df["label"].unique()) or "bf16"
    pairs, ok = _stability_tests(df, CLAMP_PREDICTIONS)
    fin = df[df["status"].isin(FINISHED)]
    lrs = _listed(_lrs(fin))
    held = [name for name, h in ok.items() if h]
    doc.add(
        f"What averts the blow-up, at lr {lrs} on fresh seeds {_seed_list(_seeds(fin))}: "
        f"{_cited(clamp)}. Predictions K1–K4, fixed in its header before it ran, "
        "each an exact one-sided McNemar test over the seeds (reported on their own, not part of 1.6's "
        "rule): K1 full MXFP8 E4M3 unstable where bf16 is not (lm_spikes replicated); K2 where the same "
        "format under E8M0's ceil rule (no clamp of the block maximum) is not; K3 where MX weights + "
        "bf16 activations are not; K4 where forward-only MX is not. "
        f"Held: {', '.join(held) if held else 'none'}.",
        "",
        md_table(pairs),
        "",
        md_table(_outcomes(df, ref)),
        "",
    )
    _curves_figure(doc, clamp, fin, "lm_spikes_clamp_curves.png", f"Train loss and gradient norm at lr {lrs}")


@dataclass(frozen=True)
class SpikeFollowUp:
    """A pre-registered follow-up of 1.5 and 1.6 in ``lm_spikes``' shape (a claim of our own, 3.17 on):
    stability predictions at ``stable_lr`` (``PairTest``) and loss predictions at ``loss_lr``
    (``LossTest``). Reproduced when every prediction holds, partially when some do, not when none does.
    ``why``: what it tests and each prediction in words; ``rule()`` adds how each kind is tested, which
    rows are measured only, and the verdict's sentence, from the tests themselves."""

    title: str
    preset: str
    why: str
    stable: tuple[PairTest, ...] = ()
    stable_lr: float | None = None
    loss: tuple[LossTest, ...] = ()
    loss_lr: float | None = None
    reference: str = "bf16"
    """The precision every other one's Δ is read against in the outcomes table (a sweep without bf16
    names its own)."""

    def names(self) -> list[str]:
        return [*(h.name for h in self.stable), *(h.name for h in self.loss if not h.measured)]

    def loss_by_lr(self) -> dict[float, tuple[LossTest, ...]]:
        """The loss tests grouped by the LR whose runs they compare, in the order first named."""
        out: dict[float, tuple[LossTest, ...]] = {}
        for h in self.loss:
            lr = self.loss_lr if h.lr is None else h.lr
            out[lr] = (*out.get(lr, ()), h)
        return out

    def rule(self) -> str:
        from analysis.lmstudy import ALPHA

        how = []
        if self.stable:
            how.append(
                f"{_and([h.name for h in self.stable])} at lr {self.stable_lr:g}: the first precision "
                "unstable (as 1.6 counts it) where the second of the same seed is not, more often than the "
                f"reverse (exact one-sided McNemar, α = {ALPHA:g})."
            )
        at = [  # "L1 and L2 at lr 0.01", one per LR whose runs a tested prediction compares
            f"{_and(names)} at lr {lr:g}"
            for lr, tests in self.loss_by_lr().items()
            if (names := [h.name for h in tests if not h.measured])
        ]
        if at:
            margins = sorted({h.margin for h in self.loss if h.margin and not h.measured})
            tost = f"; equivalence by two one-sided tests (TOST) at ±{_listed(margins)}" if margins else ""
            how.append(
                f"{', '.join(at)}: final val loss of every finished run, unstable or not, matched by seed; "
                f"one-sided paired t, α = {ALPHA:g}{tost}."
            )
        measured = [h.name for h in self.loss if h.measured]
        if measured:
            how.append(
                f"{_and(measured)} {'is' if len(measured) == 1 else 'are'} measured, not part of the rule."
            )
        names = self.names()
        verdict = (
            f"Reproduced when {names[0]} holds; not when it does not."
            if len(names) == 1
            else f"Reproduced when {_and(names)} {'both' if len(names) == 2 else 'all'} hold; partially when "
            "some do; not when none does."
        )
        rule = f"Rule (pre-registered in `{self.preset}`' header before it ran)"
        return f"{rule}: {self.why} {' '.join(how)} {verdict}"


CEIL = SpikeFollowUp(
    title="3.17 E8M0's ceil rule keeps full MX stable and closes its gap to bf16 (LM, pre-registered)",
    preset="lm_spikes_ceil",
    why=(
        "lm_spikes_clamp (1.6) found that E8M0's floor rule, which clamps a block maximum in the format's "
        "top half-binade (E4M3: [448, 512)·2^k cut to 448; E5M2 alike at 57344), causes full MXFP8 E4M3's "
        "blow-up at lr 0.1, and that under the ceil rule (no clamp) it trains. Here both formats under both "
        "rules beside bf16, on fresh seeds. C1: at lr 0.1 E5M2 under floor is unstable where under ceil it "
        "is not; C2: the same for E4M3. At lr 0.01, bf16's best, where full E4M3 ended ~0.22 above bf16 "
        "without blowing up: C3 E4M3 under floor ends above ceil; C4 the same for E5M2; C5 E4M3 under ceil "
        "≡ bf16 within ±0.02: ceil closes the gap. M1: E5M2 under ceil against bf16."
    ),
    stable=(PairTest("C1", "mxfp8_e5m2", "mxfp8_e5m2_ceil"), PairTest("C2", "mxfp8_e4m3", "mxfp8_e4m3_ceil")),
    stable_lr=0.1,
    loss=(
        LossTest("C3", "mxfp8_e4m3", "mxfp8_e4m3_ceil"),
        LossTest("C4", "mxfp8_e5m2", "mxfp8_e5m2_ceil"),
        LossTest("C5", "mxfp8_e4m3_ceil", "bf16", 0.02),
        LossTest("M1", "mxfp8_e5m2_ceil", "bf16", measured=True),
    ),
    loss_lr=0.01,
)

FWD_CEIL = SpikeFollowUp(
    title="3.18 Forward-only MX's residual gap is the floor rule's clamp: under ceil it trains like bf16 "
    "(LM, pre-registered)",
    preset="lm_spikes_fwd_ceil",
    why=(
        "in 1.5 forward-only MXFP8 E4M3 (E4M3 forward, both backward GEMMs in high precision) ended +0.015 "
        "above bf16 at lr 0.01, its interval past ±0.02 (P5 failed); under floor its forward pass still "
        "clamps each block maximum of the weights and activations. Here it under floor and under ceil, "
        "full E4M3 under ceil and bf16, on fresh seeds: F1 forward-only MX under floor ends above it under "
        "ceil; F2 forward-only MX under ceil ≡ bf16 within ±0.02. M1: 1.5's P5 on fresh seeds (1.5 keeps "
        "its own verdict); M2: full E4M3 under ceil against bf16."
    ),
    loss=(
        LossTest("F1", "e4m3-fwd", "e4m3-fwd-ceil"),
        LossTest("F2", "e4m3-fwd-ceil", "bf16", 0.02),
        LossTest("M1", "e4m3-fwd", "bf16", measured=True),
        LossTest("M2", "mxfp8_e4m3_ceil", "bf16", measured=True),
    ),
    loss_lr=0.01,
)

E5M2_ROLES = SpikeFollowUp(
    title="3.19 Under the ceil rule E5M2's cost lies in the forward operands, not the gradients (LM, "
    "pre-registered)",
    preset="lm_spikes_e5m2_roles",
    why=(
        "in 3.17 the ceil rule took the floor rule's clamp away and full MXFP8 E4M3 then trained at lr 0.1 "
        "(+0.017 above bf16), but full E5M2 still ended +0.29 above bf16, 2 of 6 unstable (C1 failed). "
        "Without the clamp what is left of E5M2 is its 2-bit mantissa; the usual FP8 training recipe (E4M3 "
        "forward, E5M2 gradients) assumes the gradients tolerate it and the forward operands do not. Here, "
        "all under ceil beside bf16 on fresh seeds: full E4M3, full E5M2, and the two swaps, E4M3 weights "
        "and activations (in every GEMM) with both gradient roles in E5M2, and the reverse. E1 full E5M2 "
        "ends above full E4M3; E2 E5M2 operands with E4M3 gradients end above E4M3 operands with E5M2 "
        "gradients; E3 E4M3 operands with E5M2 gradients ≡ full E4M3 within ±0.02. M1: what E4M3 "
        "gradients buy E5M2 operands; M2: full E5M2 against bf16; the unstable runs are counted too (no "
        "stability test over 8 seeds could separate 3.17's 2 of 6 from none, so none was predicted)."
    ),
    loss=(
        LossTest("E1", "mxfp8_e5m2_ceil", "mxfp8_e4m3_ceil"),
        LossTest("E2", "e5m2_e4m3g_ceil", "e4m3_e5m2g_ceil"),
        LossTest("E3", "e4m3_e5m2g_ceil", "mxfp8_e4m3_ceil", 0.02),
        LossTest("M1", "e5m2_e4m3g_ceil", "mxfp8_e5m2_ceil", measured=True),
        LossTest("M2", "mxfp8_e5m2_ceil", "bf16", measured=True),
    ),
    loss_lr=0.1,
)

E5M2_GRADS = SpikeFollowUp(
    title="3.20 E5M2's cost lies in both gradient GEMMs, and in rounding to nearest (LM, pre-registered)",
    preset="lm_spikes_e5m2_grads",
    why=(
        "3.19 found the reverse of the usual FP8 recipe: at lr 0.1 under ceil, E4M3 weights and activations "
        "with E5M2 gradients ended +0.45 above full E4M3 (8 of 8 unstable), E5M2 operands with E4M3 "
        "gradients +0.02. The incoming gradient dY is quantized twice per Linear: for dgrad (dX = dY·W, "
        "which flows to the layers below) and for wgrad (dW = dYᵀ·X, which Adam turns into the step). Here "
        "full E4M3, E5M2 in both gradient roles, in dgrad's alone, in wgrad's alone, and in both rounded "
        "stochastically (exact in expectation), all under ceil, on fresh seeds: G1 E5M2 gradients end above "
        "full E4M3 (3.19's reversal again); G2 E5M2 in wgrad alone ends above full E4M3; G3 the same for "
        "dgrad alone; G4 E5M2 gradients rounded to nearest end above them rounded stochastically. M1: "
        "stochastically rounded E5M2 gradients against full E4M3; M2: wgrad alone against dgrad alone."
    ),
    loss=(
        LossTest("G1", "e4m3_e5m2g_ceil", "mxfp8_e4m3_ceil"),
        LossTest("G2", "e4m3_e5m2wgrad_ceil", "mxfp8_e4m3_ceil"),
        LossTest("G3", "e4m3_e5m2dgrad_ceil", "mxfp8_e4m3_ceil"),
        LossTest("G4", "e4m3_e5m2g_ceil", "e4m3_e5m2g_sr_ceil"),
        LossTest("M1", "e4m3_e5m2g_sr_ceil", "mxfp8_e4m3_ceil", measured=True),
        LossTest("M2", "e4m3_e5m2wgrad_ceil", "e4m3_e5m2dgrad_ceil", measured=True),
    ),
    loss_lr=0.1,
    reference="mxfp8_e4m3_ceil",  # no bf16 here: 3.19 set full E4M3 under ceil within 0.006 of it
)

E5M2_HEAD = SpikeFollowUp(
    title="3.21 E5M2's gradient cost is the output head's (LM, pre-registered)",
    preset="lm_spikes_e5m2_head",
    why=(
        "3.20 put E5M2's cost at lr 0.1 under ceil in the incoming gradient dY of both gradient GEMMs "
        "rounded to nearest (+0.44 above full E4M3, every run unstable; each GEMM alone < 0.01), but not "
        "where in the network. The output head's dY, softmax − onehot per token, is unlike any other "
        "Linear's: a row summing to exactly 0, one entry near −1 and many small positive ones, which "
        "rounding to nearest with a 2-bit mantissa errs on alike across tokens. Here full E4M3 and E5M2 "
        "gradients (both roles, to nearest; E4M3 everywhere else), each with every Linear quantized, with "
        "the head in fp32, and with only the head quantized (the blocks' eight Linears in fp32), all under "
        "ceil, on fresh seeds: H1 E5M2 gradients end above full E4M3 (3.20's G1 again); H2 with the head in "
        "fp32, E5M2 gradients ≡ E4M3 gradients within ±0.02; H3 with only the head quantized, E5M2 "
        "gradients end above E4M3 gradients. M1: what the head in fp32 buys E5M2 gradients; M2: what it "
        "does to full E4M3."
    ),
    loss=(
        LossTest("H1", "e4m3_e5m2g_ceil", "mxfp8_e4m3_ceil"),
        LossTest("H2", "e4m3_e5m2g_ceil_hphead", "mxfp8_e4m3_ceil_hphead", 0.02),
        LossTest("H3", "e4m3_e5m2g_ceil_headonly", "mxfp8_e4m3_ceil_headonly"),
        LossTest("M1", "e4m3_e5m2g_ceil", "e4m3_e5m2g_ceil_hphead", measured=True),
        LossTest("M2", "mxfp8_e4m3_ceil_hphead", "mxfp8_e4m3_ceil", measured=True),
    ),
    loss_lr=0.1,
    reference="mxfp8_e4m3_ceil",
)

E5M2_LR = SpikeFollowUp(
    title="3.22 E5M2's gradient cost holds below lr 0.1 (LM, pre-registered)",
    preset="lm_spikes_e5m2_lr",
    why=(
        "3.19 and 3.20 measured E5M2's gradient cost at lr 0.1 alone, 10× bf16's best, where it came with "
        "every run unstable; 3.17 measured full E5M2 under ceil at lr 0.01 +0.06 above bf16. Is it a "
        "high-LR instability only? Here 3.20's full E4M3 and E5M2 gradients rounded to nearest or "
        "stochastically (both roles; E4M3 everywhere else), all under ceil, at lr 0.01 and 0.03, on fresh "
        "seeds: L1 at lr 0.01 E5M2 gradients end above full E4M3; L2 at lr 0.01 rounding them to nearest "
        "ends above rounding them stochastically; L3 and L4 the same at lr 0.03. M1, M2: stochastically "
        "rounded E5M2 gradients against full E4M3 at each LR."
    ),
    loss=(
        LossTest("L1", "e4m3_e5m2g_ceil", "mxfp8_e4m3_ceil"),
        LossTest("L2", "e4m3_e5m2g_ceil", "e4m3_e5m2g_sr_ceil"),
        LossTest("M1", "e4m3_e5m2g_sr_ceil", "mxfp8_e4m3_ceil", measured=True),
        LossTest("L3", "e4m3_e5m2g_ceil", "mxfp8_e4m3_ceil", lr=0.03),
        LossTest("L4", "e4m3_e5m2g_ceil", "e4m3_e5m2g_sr_ceil", lr=0.03),
        LossTest("M2", "e4m3_e5m2g_sr_ceil", "mxfp8_e4m3_ceil", measured=True, lr=0.03),
    ),
    loss_lr=0.01,
    reference="mxfp8_e4m3_ceil",
)

E5M2_GAMMA = SpikeFollowUp(
    title="3.23 The head's E5M2 cost needs the norms' γ free to move (LM, pre-registered)",
    preset="lm_spikes_e5m2_gamma",
    why=(
        "in 3.21 and 3.22, looked at after their verdicts in the runs' final checkpoints (which the records "
        "do not keep), every run whose head had E5M2 gradients rounded to nearest ended with the final "
        "LayerNorm's γ several times larger and the head's weights several times smaller than its E4M3 "
        "twin's; stochastic rounding did not. Logits = W_head · (γ ⊙ x̂) do not "
        "change when γ is scaled by c and the head's columns by 1/c, so the loss has no gradient along that "
        "direction and only gradient error moves a run along it. Here full E4M3 and E5M2 gradients (both "
        "roles, to nearest; E4M3 everywhere else), all under ceil, with every norm's γ and β training at "
        "1e-3 × the LR (the blocks' norms too: a confound this preset cannot separate), on fresh seeds: S1 "
        "E5M2 gradients ≡ full E4M3 within ±0.02. The unstable runs are counted too (with γ free, every "
        "such run of 3.19–3.21 was unstable)."
    ),
    loss=(LossTest("S1", "e4m3_e5m2g_ceil", "mxfp8_e4m3_ceil", 0.02),),
    loss_lr=0.1,
    reference="mxfp8_e4m3_ceil",
)

FOLLOW_UPS = (CEIL, FWD_CEIL, E5M2_ROLES, E5M2_GRADS, E5M2_HEAD, E5M2_LR, E5M2_GAMMA)


def follow_up_claim(doc: _Doc, spec: SpikeFollowUp, src: Source) -> None:
    """A ``SpikeFollowUp`` judged on its sweep: the paired stability table at its high LR, the loss
    tests at its low LR, every (LR, precision)'s outcomes, and the curves at each LR it tests."""
    from analysis import lmstudy

    if not src.ran:
        doc.claim(spec.title, NOT_RUN, spec.rule(), src)
        return
    df = lmstudy.label_column(src.df)
    df = df.assign(_lr=pd.to_numeric(df["train.lr"], errors="coerce"))
    held: dict[str, bool] = {}
    parts = []
    groups = [(spec.stable, spec.stable_lr, _stability_tests, "unstable runs paired by seed")] + [
        (preds, lr, _loss_tests, "final val loss on runs matched by seed")
        for lr, preds in spec.loss_by_lr().items()
    ]
    for preds, lr, tests, what in groups:
        if preds:
            table, own = tests(df[np.isclose(df["_lr"], lr)], preds)
            held |= own
            parts += [f"At lr {lr:g}, {what} ({_and([h.name for h in preds])}):", "", md_table(table), ""]
    doc.claim(spec.title, _all_some_none(held), spec.rule(), src)
    fin = df[df["status"].isin(FINISHED)]
    doc.add(
        _setting_line(fin),
        "",
        *parts,
        "Each LR and precision (every finished run; unstable as 1.6 counts it):",
        "",
        md_table(_outcomes(df, spec.reference)),
        "",
    )
    for value in dict.fromkeys(v for v in (spec.stable_lr, *spec.loss_by_lr()) if v is not None):
        at = fin[np.isclose(fin["_lr"], value)]
        if not at.empty:
            name = f"{spec.preset}_lr{value:g}.png"
            title = f"Train loss and gradient norm at lr {value:g}"
            _curves_figure(doc, src, at, name, title, spec.reference)


def _pilot_line(pilot: Source | None) -> list[str]:
    if pilot is None or not pilot.ran:
        return []
    fin = pilot.df[pilot.df["status"].isin(FINISHED)].assign(
        lr=lambda d: pd.to_numeric(d["train.lr"], errors="coerce")
    )
    fin = fin.sort_values("lr")
    bad = int(fin["unstable"].fillna(False).astype(bool).sum())
    losses = " / ".join(f"{v:.3f}" for v in fin["final_val_loss"])
    return [
        f"The pilot that chose the LRs, before any MX run: {_cited(pilot)}, bf16 alone, "
        f"seed {_seed_list(_seeds(fin))}: "
        f"final val loss {losses} at lr {_listed(list(fin['lr']), ' / ')}; "
        f"unstable in {bad} of {len(fin)}.",
        "",
    ]


def _lrs(fin: pd.DataFrame) -> list[float]:
    lr = pd.to_numeric(fin["train.lr"], errors="coerce") if "train.lr" in fin else pd.Series(dtype=float)
    return sorted(lr.dropna().unique())


def _listed(values: list[float], sep: str = ", ") -> str:
    return sep.join(f"{v:g}" for v in values)


def _seeds(fin: pd.DataFrame) -> list[int]:
    return sorted(int(v) for v in fin["train.seed"].dropna().unique())


def _setting_line(fin: pd.DataFrame) -> str:
    """What a one-shape LM sweep trained: N, steps, D/N, its LRs and seeds."""
    return (
        f"These models have N = {_span(fin['N'], si)} parameters, trained "
        f"{_span(fin['steps'], '{:,.0f}'.format)} steps "
        f"(D/N = {_span(fin['tokens_per_param'], '{:.0f}'.format)}) at lr {_listed(_lrs(fin))}; "
        f"seeds {_seed_list(_seeds(fin))}."
    )


def _span(values: pd.Series, fmt) -> str:
    v = pd.to_numeric(values, errors="coerce").dropna()
    if v.empty:
        return "–"
    lo, hi = fmt(v.min()), fmt(v.max())
    return lo if lo == hi else f"{lo}–{hi}"


def _outcomes(df: pd.DataFrame, ref: str) -> pd.DataFrame:
    """Per (LR, precision) of a one-shape LM sweep (1.5, 1.6): the runs' outcomes, and their final val
    loss and Δ vs ``ref`` over every finished run with a finite loss, unstable ones included (leaving
    them out would keep only the runs that survived)."""
    from analysis import lmstudy

    fin = df[df["status"].isin(FINISHED)]
    lr = pd.to_numeric(fin["train.lr"], errors="coerce")
    rows = []
    for value in _lrs(fin):
        at = fin[np.isclose(lr, value)]
        deltas = lmstudy.deltas_vs_reference(at.assign(unstable=False), reference=ref).set_index("label")
        for label in lmstudy.ordered_labels(lmstudy.label_info(at), ref):  # bf16, formats, then the fixes
            g = at[at["label"] == label]
            bad = g["unstable"].fillna(False).astype(bool)
            spiked = g["spiked"].fillna(False).astype(bool) & ~bad
            loss = pd.to_numeric(g["final_val_loss"], errors="coerce")
            worse = loss - pd.to_numeric(g["min_val_loss"], errors="coerce")
            d = deltas.loc[label] if label in deltas.index else None
            rows.append(
                {
                    "lr": f"{value:g}",
                    "format": label,
                    "runs": len(g),
                    "unstable": int(bad.sum()),
                    "diverged": int(g["diverged"].fillna(False).astype(bool).sum()),
                    "spiked, recovered": int(spiked.sum()),
                    f"ended ≥ {ABOVE_BEST:g} above its best": int((worse >= ABOVE_BEST).sum()),
                    "final val loss (mean ± sd)": _mean_sd(loss.mean(), loss.std(ddof=1), "{:.4f}"),
                    f"Δ vs {ref} (mean ± sd over seeds)": (
                        "–" if d is None else _mean_sd(d["mean_over_seeds"], d["sd_over_seeds"], "{:+.4f}")
                    ),
                }
            )
    return pd.DataFrame(rows)


def _mean_sd(mean: float, sd: float, fmt: str) -> str:
    if not np.isfinite(mean):
        return "–"
    return fmt.format(mean) + (f" ± {sd:.4f}" if np.isfinite(sd) else "")


def _spikes_first_look(doc: _Doc, lm: Source, claim: bool) -> None:
    """``lm_precisions``' unstable runs per format at its one LR: 1.6's verdict where ``lm_spikes`` has
    not run (the rule below), else the first look the scan followed."""
    from analysis import lmstudy

    rule = (
        "Rule: reproduced when MX runs spike or diverge (spike detector: 100-step mean rising 0.008 above "
        "its minimum; unstable = diverged or not recovered) where bf16 runs of the same (budget, shape, "
        "seed) do not. The study saw them at ≥ 10⁸ parameters (its claim)."
    )
    if not lm.ran:
        if claim:
            doc.claim(SPIKES_TITLE, NOT_RUN, rule, lm)
        return
    df = lmstudy.label_column(lm.df)
    ref = lmstudy.reference_label(df["label"].unique())
    unstable = instability_map(df, "label", None).set_index("label")
    if claim:
        if ref is None:
            doc.claim(SPIKES_TITLE, NOT, rule + " (no bf16 runs to compare against)", lm)
            return
        ref_bad = int(unstable.loc[ref, "n_unstable"]) if ref in unstable.index else 0
        mx_bad = int(unstable.drop(index=ref, errors="ignore")["n_unstable"].sum())
        doc.claim(SPIKES_TITLE, REPRODUCED if mx_bad > 0 and ref_bad == 0 else NOT, rule, lm)
    fin = df[df["status"].isin(FINISHED)]
    if not claim:
        doc.add(_first_look_line(lm, df) + " Unstable runs per format:", "")
    doc.add(f"These models have N = {si(fin['N'].min())}–{si(fin['N'].max())} parameters.", "")
    t = unstable.reset_index()[["label", "n_unstable", "n"]].rename(
        columns={"n_unstable": "unstable", "n": "runs"}
    )
    doc.add(md_table(t), "")


def law_section(doc: _Doc, lm: Source) -> None:
    from analysis import lmstudy
    from analysis.fits import InsufficientData

    doc.add("## Beyond the papers: one scaling law over all precisions", "")
    title = "3.1 Fewer bits per element, fewer effective parameters (Kumar et al. 2024)"
    rule = (
        "L(N, D, P) = E + A/(N·m_P)^α + B/D^β with m_bf16 = 1 and E, A, B, α, β shared (the form of "
        "Kumar et al. 2024, *Scaling Laws for Precision*): format P trains like bf16 with m_P × the "
        "parameters. 95 % intervals: bootstrap over runs within each format. Rule: reproduced when m_P "
        "falls with the bits per element, every width's intervals lying below every wider width's (the "
        "plain W = A formats, bf16 at 16 bits with m = 1); partially when some neighbouring widths "
        "separate so and none in the opposite order; else not."
    )
    if not lm.ran:
        doc.claim(title, NOT_RUN, rule, lm)
        return
    df = lmstudy.label_column(lm.df)
    ref = lmstudy.reference_label(df["label"].unique())
    try:
        fit, excluded = lmstudy.fit_law(df, reference=ref, n_boot=200)
    except InsufficientData as e:
        doc.claim(title, NOT, f"{rule} Too few runs: {e}", lm)
        return
    table = lmstudy.law_table(df, fit, reference=ref)
    order = lmstudy.bit_ordering(table, df)
    if order.empty or order["reversed"].any() or not order["separated"].any():
        verdict = NOT
    else:
        verdict = REPRODUCED if order["separated"].all() else PARTIAL
    doc.claim(title, verdict, rule, lm)
    if fit.E < 1e-6:
        rule_note = (
            f"E collapsed to ≈ 0 ({fit.E:.2g}): at N = {si(df['N'].min())}–{si(df['N'].max())} and "
            f"C ≤ {sci(df['budget'].max())} FLOPs the data do not pin "
            "the irreducible loss, so A, α and the m_P are conditional on E = 0. The paired Δ of 1.5 is "
            "the stronger test of a gap; an m_P interval containing 1 with a significant Δ means the "
            "bootstrap over runs is the weaker of the two."
        )
        doc.add(rule_note, "")
    doc.add(
        f"Shared: E = {fit.E:.4g}, A = {fit.A:.4g}, B = {fit.B:.4g}, α = {fit.alpha:.3f}, "
        f"β = {fit.beta:.3f}; R² (log L) = {fit.r2:.4f} over {fit.n_runs} runs.",
        "",
    )
    doc.add(md_table(lmstudy.display_law_table(table, ref or "bf16")), "")
    if not order.empty:
        shown = order.assign(
            pair=[f"{a} vs {b} bits" for a, b in zip(order["bits"], order["bits_wider"], strict=True)],
            verdict=[
                "below" if s else "above" if r else "overlap"
                for s, r in zip(order["separated"], order["reversed"], strict=True)
            ],
        )
        doc.add(
            "Neighbouring element widths (plain formats): the narrower width's largest upper end against "
            "the wider width's smallest lower end of the m_P intervals:",
            "",
            md_table(
                shown[["pair", "labels", "labels_wider", "high", "low_wider", "verdict"]].rename(
                    columns={
                        "labels": "narrower",
                        "labels_wider": "wider",
                        "high": "upper end (narrower)",
                        "low_wider": "lower end (wider)",
                    }  # fmt: skip
                )
            ),
            "",
        )
    doc.add(*[f"- `{k}` left out of the fit: {why}" for k, why in excluded.items()], "")
    from analysis import plots

    doc.figure(
        plots.loss_vs_compute_plot(lmstudy.loss_vs_compute(df), fit),
        "lm_loss_vs_compute.png",
        "loss vs compute, every precision, with the fitted law",
    )
    doc.figure(plots.multiplier_plot(fit), "lm_multipliers.png", "effective-parameter multipliers")
