"""How a pre-registered claim of our own becomes a section of docs/results.md: a claim
(``Preregistered``) names its preset, its predictions (``Prediction``: one format ends above another
by a one-sided paired t-test over matched runs, or the two are equivalent within a margin by TOST, or
one gap exceeds another) and which of them decide the verdict; ``preregistered_section`` tests each
on the fresh seeds, gives the verdict again over the per-seed means (the stricter check), counts the
runs left out as unstable, and draws the section's Δ-vs-bf16 table and figure (``FIGURES``) beside the
trained tensors' errors (``PRICES``). The claims themselves, fixed in their presets' headers before the
sweeps ran, are in ``analysis.results.preregistered_claims``.
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
from analysis.results.common import NOT, NOT_RUN, PARTIAL, REPRODUCED, Source, _and, _Doc, _rel, _seed_list
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
        if len(self.decide) == 1:  # one prediction decides: nothing in between
            (h,) = self.decide
            verdicts = f"reproduced when {h} holds; not when {h} fails"
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
    grads = str(g["grad_rule"])
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


ROUNDING_WORDS = {
    "both": ("the gradients rounded to nearest or stochastically",
             "Stochastic rounding of the gradients: where does it help?"),
    "stochastic": ("every run's gradients rounded stochastically",
                   "Each format with its gradients rounded stochastically"),
    "nearest": ("every run's gradients rounded to nearest",
                "Each format with its gradients rounded to nearest"),
}  # fmt: skip
"""How a rounding section's points had their gradients rounded → (its table's lead and caption, its
figure's title)."""


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
    # how the points' gradients were rounded, both ways or one, in the lead, the caption and the title
    kind = "both" if pts["own"].nunique() == 2 else "stochastic" if sr.all() else "nearest"
    how, title = ROUNDING_WORDS[kind]
    doc.add(f"Δ vs {ref} on {names[id(source)]} by block format, {how}:", "", md_table(shown), "")
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
    caption = f"Δ vs bf16 by block format, {how}"
    fig = plots.gradient_format_plot(
        pts,
        reference=ref,
        kinds=("gradients rounded to nearest", "gradients rounded stochastically"),
        title=title,
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
