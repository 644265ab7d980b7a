"""analysis/lmstudy.py: Δ loss vs bf16 on matched runs (means, seed sds, significance, matching,
largest budget), the precision law's first table, loss against compute, the three figures, and the
report's two sections on a small synthetic sweep directory (and their silence on a proxy sweep)."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from matplotlib.figure import Figure
from scipy import stats
from test_analysis import write_run

from analysis import lmstudy, plots
from analysis.fits import InsufficientData

LAW = dict(E=1.8, A=20.0, B=40.0, alpha=0.35, beta=0.3)
SHAPES = {(1, 16): 11344.0, (1, 32): 28832.0, (2, 48): 70000.0}
LADDER = {  # budget → shapes run at it (the lm_precisions design)
    3e10: [(1, 16), (1, 32)],
    1e11: [(1, 16), (1, 32), (2, 48)],
    2e11: [(1, 32), (2, 48)],
    3e11: [(1, 32), (2, 48)],
}
# label → (w, a, fwd_only, multiplier m_P)
FORMATS = {
    "bf16": ("bf16", "bf16", False, 1.0),
    "mxfp8_e4m3": ("fp8_e4m3", "fp8_e4m3", False, 0.9),
    "mxfp4_e2m1": ("fp4_e2m1", "fp4_e2m1", False, 0.45),
    "e4m3w-bf16a": ("fp8_e4m3", "bf16", False, 1.0),
    "e4m3-fwd": ("fp8_e4m3", "fp8_e4m3", True, 0.97),
}


def law(N, D, m=1.0):
    return LAW["E"] + LAW["A"] / (N * m) ** LAW["alpha"] + LAW["B"] / D ** LAW["beta"]


def frame(
    formats=FORMATS, seeds=(0, 1, 2), seed_sd=0.01, noise=0.002, rng_seed=0, offsets=None
) -> pd.DataFrame:
    """A runs frame as ``collect`` gives it: every format × budget × shape × seed, loss from the law with
    the format's multiplier, plus a per-seed effect shared by every format (it cancels in matched Δ),
    per-run noise and an optional additive offset per label."""
    rng = np.random.default_rng(rng_seed)
    seed_effect = {s: rng.normal(0, seed_sd) for s in seeds}
    rows = []
    for label, (w, a, fwd, m) in formats.items():
        for C, shapes in LADDER.items():
            for depth, d in shapes:
                N = SHAPES[(depth, d)]
                D = C / (6 * N)
                for s in seeds:
                    L = law(N, D, m) + seed_effect[s] + rng.normal(0, noise) + (offsets or {}).get(label, 0.0)
                    rows.append(
                        {
                            "run": f"{label}_C{C:.0e}_d{d}L{depth}_s{s}",
                            "precision": f"{w}/{a}" + (" fwd-only" if fwd else ""),
                            "sweep.precision": label,
                            "w": w,
                            "a": a,
                            "fwd_only": fwd,
                            "pair": f"{w}/{a}",
                            "train.seed": s,
                            "model.depth": depth,
                            "model.d_model": d,
                            "N": N,
                            "D": D,
                            "C": 6 * N * D,
                            "budget": C,
                            "status": "done",
                            "unstable": False,
                            "final_val_loss": L,
                        }
                    )
    return pd.DataFrame(rows)


def exact_frame() -> pd.DataFrame:
    """bf16 and two formats on 2 budgets × 2 shapes × 3 seeds with known differences: "big" is bf16 +
    0.05 + (−0.01, 0, +0.01) by seed, "same" is bf16 ± 0.001 alternating (mean 0)."""
    rows = []
    k = 0
    for C in (1e11, 3e11):
        for depth, d in ((1, 32), (2, 48)):
            for s in (0, 1, 2):
                base = 3.0 - 0.1 * math.log10(C) + 0.01 * d / 16 + 0.02 * s
                for label, L in (
                    ("bf16", base),
                    ("big", base + 0.05 + 0.01 * (s - 1)),
                    ("same", base + (0.001 if k % 2 else -0.001)),
                ):
                    rows.append(
                        {
                            "sweep.precision": label,
                            "precision": label,
                            "w": {"bf16": "bf16", "big": "fp4_e2m1", "same": "fp8_e4m3"}[label],
                            "a": {"bf16": "bf16", "big": "fp4_e2m1", "same": "fp8_e4m3"}[label],
                            "fwd_only": False,
                            "train.seed": s,
                            "model.depth": depth,
                            "model.d_model": d,
                            "N": SHAPES[(depth, d)],
                            "budget": C,
                            "status": "done",
                            "unstable": False,
                            "final_val_loss": L,
                        }
                    )
                k += 1
    return pd.DataFrame(rows)


# ----------------------------------------------------------------------------------------------
# labels


def test_label_column_prefers_the_named_precision_and_finds_the_reference():
    df = pd.DataFrame(
        {
            "precision": ["bf16/bf16 ln=bf16", "fp8_e4m3/bf16", "fp4_e2m1/fp4_e2m1"],
            "sweep.precision": ["bf16", None, np.nan],
        }
    )
    out = lmstudy.label_column(df)
    assert list(out["label"]) == ["bf16", "fp8_e4m3/bf16", "fp4_e2m1/fp4_e2m1"] and "label" not in df
    assert list(lmstudy.label_column(df.drop(columns="sweep.precision"))["label"]) == list(df["precision"])
    assert lmstudy.reference_label(["mxfp4", "bf16", "bf16/bf16"]) == "bf16"
    assert lmstudy.reference_label(["fp8_e4m3/bf16", "bf16/bf16"]) == "bf16/bf16"
    assert lmstudy.reference_label(["bf16/bf16 ln=bf16", "fp8/fp8"]) == "bf16/bf16 ln=bf16"
    assert lmstudy.reference_label(["fp8_e4m3/bf16", "mxfp4_e2m1"]) is None


def test_labels_are_ordered_reference_then_formats_then_hybrids():
    info = lmstudy.label_info(frame())
    assert list(info.index) == ["bf16", "mxfp8_e4m3", "mxfp4_e2m1", "e4m3w-bf16a", "e4m3-fwd"]
    assert list(info["hybrid"]) == [False, False, False, True, True]
    assert lmstudy.format_rank("mxfp6_e2m3") < lmstudy.format_rank("fp6_e3m2") < lmstudy.format_rank("nvfp4")


def test_a_format_with_gradients_of_its_own_follows_the_plain_format_of_its_operands():
    """3.19's swaps: E4M3 operands with E5M2 gradients come after full E4M3, not before it by name."""
    rows = [
        {"sweep.precision": label, "w": w, "a": w, "precision.g_dgrad": g}
        for label, w, g in (
            ("e5m2_e4m3g", "fp8_e5m2", "fp8_e4m3"),
            ("e4m3_e5m2g", "fp8_e4m3", "fp8_e5m2"),
            ("mxfp8_e5m2", "fp8_e5m2", None),
            ("mxfp8_e4m3", "fp8_e4m3", None),
            ("bf16", "bf16", None),
        )
    ]
    info = lmstudy.label_info(pd.DataFrame(rows))
    assert list(info.index) == ["bf16", "mxfp8_e4m3", "e4m3_e5m2g", "e5m2_e4m3g", "mxfp8_e5m2"]
    assert not info["hybrid"].any()  # gradients in another block format stay plain formats


# ----------------------------------------------------------------------------------------------
# deltas


def test_deltas_recover_known_means_seed_sds_and_significance():
    d = lmstudy.deltas_vs_reference(exact_frame()).set_index("label")
    assert list(d.index) == ["same", "big"]  # fp8_e4m3 before fp4_e2m1
    big, same = d.loc["big"], d.loc["same"]
    assert big["n_pairs"] == 12 and big["seeds"] == 3
    assert big["mean_delta"] == pytest.approx(0.05) and big["mean_over_seeds"] == pytest.approx(0.05)
    assert big["sd_over_seeds"] == pytest.approx(0.01)  # per-seed means 0.04, 0.05, 0.06
    assert big["sd_delta"] == pytest.approx(np.std([0.04, 0.05, 0.06] * 4, ddof=1))
    assert big["significant"] and big["p_value"] < 1e-6
    assert big["rel_delta"] > 0
    assert same["mean_delta"] == pytest.approx(0.0, abs=1e-12) and not same["significant"]
    assert same["p_value"] > 0.5


def test_deltas_on_noisy_runs_separate_a_real_offset_from_none():
    df = frame(offsets={"mxfp8_e4m3": 0.0}, formats={k: FORMATS[k] for k in ("bf16", "mxfp8_e4m3")})
    df2 = frame(formats={"bf16": FORMATS["bf16"], "twin": ("bf16", "bf16", False, 1.0)}, rng_seed=3)
    d = lmstudy.deltas_vs_reference(df).set_index("label").loc["mxfp8_e4m3"]
    # m = 0.9 raises the parameter term by 0.9^-0.35 − 1 ≈ 3.8 %: a few 1e-2 at these sizes
    assert d["significant"] and d["mean_delta"] > 0.01 and d["n_pairs"] == 27
    twin = lmstudy.deltas_vs_reference(df2).set_index("label").loc["twin"]
    assert not twin["significant"] and abs(twin["mean_delta"]) < 0.003
    assert twin["sd_over_seeds"] < 0.003  # the shared seed effect (sd 0.01) cancels in matched pairs


def test_unmatched_unfinished_and_unstable_runs_are_left_out():
    df = exact_frame()
    is_ref = df["sweep.precision"] == "bf16"
    drop = is_ref & (df["train.seed"] == 2) & (df["budget"] == 3e11)  # big/same lose 2 pairs each
    df = df[~drop].copy()
    df.loc[(df["sweep.precision"] == "big") & (df["train.seed"] == 0), "status"] = "diverged"  # 4 runs
    df.loc[(df["sweep.precision"] == "same") & (df["train.seed"] == 1), "unstable"] = True  # 4 runs
    extra = df[df["sweep.precision"] == "big"].iloc[[0]].assign(**{"train.seed": 7})  # no bf16 seed 7
    df = pd.concat([df, extra], ignore_index=True)
    d = lmstudy.deltas_vs_reference(df).set_index("label")
    assert d.loc["big", "n_pairs"] == 12 - 2 - 4 and d.loc["big", "seeds"] == 2
    assert d.loc["same", "n_pairs"] == 12 - 2 - 4
    assert d.loc["big", "mean_over_seeds"] == pytest.approx(0.055)  # seeds 1, 2: 0.05, 0.06
    with pytest.raises(InsufficientData):
        lmstudy.deltas_vs_reference(df[df["sweep.precision"] != "bf16"])


def test_runs_of_different_lrs_never_pair():
    # An LR scan (lm_spikes): the LR moves the loss by far more than the format. bf16 ran at both LRs,
    # the format only at the first (its run at the second was unstable); pairing across LRs would
    # set 2.1 against bf16's mean over both LRs (2.5) and report −0.4.
    df = exact_frame()
    df = df[(df["budget"] == 1e11) & (df["model.depth"] == 1) & (df["sweep.precision"] != "same")]
    high = df.assign(**{"train.lr": 1.0, "final_val_loss": df["final_val_loss"] + 1.0})
    high.loc[high["sweep.precision"] == "big", "unstable"] = True
    d = lmstudy.deltas_vs_reference(pd.concat([df.assign(**{"train.lr": 1e-2}), high])).set_index("label")
    assert d.loc["big", "n_pairs"] == 3
    assert d.loc["big", "mean_delta"] == pytest.approx(0.05)


def test_unstable_pairs_count_the_paired_table_and_test_it_one_sided():
    df = exact_frame()  # 12 (budget, shape, seed) keys per label
    df = df[df["sweep.precision"] != "same"].copy()
    key = df["budget"].eq(1e11) & df["model.depth"].eq(1)  # 3 keys: seeds 0–2
    big, ref = df["sweep.precision"].eq("big"), df["sweep.precision"].eq("bf16")
    df.loc[big & ~key, "unstable"] = True  # 9 keys: big alone
    df.loc[big & key & df["train.seed"].eq(0), "status"] = "diverged"  # 1 key: both (a diverged run
    df.loc[big & key & df["train.seed"].eq(0), "unstable"] = True  # is unstable)
    df.loc[ref & key & df["train.seed"].isin([0, 1]), "unstable"] = True  # 1 key: bf16 alone
    df.loc[ref & key & df["train.seed"].eq(2), "status"] = "failed"  # not finished: no pair
    r = lmstudy.unstable_pairs(df, "big", "bf16")
    assert (r["n_pairs"], r["both"], r["only"], r["only_reference"], r["neither"]) == (11, 1, 9, 1, 0)
    assert r["p_greater"] == pytest.approx(stats.binomtest(9, 10, alternative="greater").pvalue)
    mirror = lmstudy.unstable_pairs(df, "bf16", "big")
    assert (mirror["only"], mirror["only_reference"]) == (1, 9) and mirror["p_greater"] > 0.99
    calm = lmstudy.unstable_pairs(exact_frame(), "big", "bf16")
    assert (calm["n_pairs"], calm["neither"], calm["p_greater"]) == (12, 12, 1.0)


def test_largest_budget_is_the_largest_matched_one_per_label():
    df = exact_frame()
    d = lmstudy.deltas_vs_reference(df, budget="largest").set_index("label")
    assert (d["budget"] == 3e11).all() and (d["n_pairs"] == 6).all()
    gone = (df["sweep.precision"] == "bf16") & (df["budget"] == 3e11) & (df["model.d_model"] == 48)
    only_big = df[~gone | (df["sweep.precision"] != "bf16")]
    d2 = lmstudy.deltas_vs_reference(only_big, budget="largest").set_index("label")
    assert (d2["budget"] == 3e11).all() and (d2["n_pairs"] == 3).all()  # d32 still matched at 3e11
    no_top = df[~((df["sweep.precision"] == "bf16") & (df["budget"] == 3e11))]
    d3 = lmstudy.deltas_vs_reference(no_top, budget="largest").set_index("label")
    assert (d3["budget"] == 1e11).all() and (d3["n_pairs"] == 6).all()
    d4 = lmstudy.deltas_vs_reference(df, budget=1e11)
    assert (d4["budget"] == 1e11).all() and (d4["n_pairs"] == 6).all()
    assert lmstudy.deltas_vs_reference(df)["budget"].isna().all()


# ----------------------------------------------------------------------------------------------
# law table, loss vs compute


@pytest.fixture(scope="module")
def law_fit():
    df = frame(noise=0.001, seed_sd=0.002)
    fit, excluded = lmstudy.fit_law(df, n_boot=20, seed=0)
    return df, fit, excluded


def test_fit_law_recovers_multipliers_and_law_table(law_fit):
    df, fit, excluded = law_fit
    assert excluded == {} and fit.reference == "bf16"
    assert fit.multipliers["mxfp4_e2m1"] == pytest.approx(0.45, rel=0.25)
    assert fit.multipliers["mxfp4_e2m1"] < fit.multipliers["mxfp8_e4m3"] < 1.05
    t = lmstudy.law_table(df, fit)
    assert list(t.columns) == [
        "label",
        "reference",
        "hybrid",
        "m_P",
        "ci_low",
        "ci_high",
        "budget",
        "delta",
        "delta_sd",
        "seeds",
        "n_pairs",
        "p_value",
        "significant",
        "n_runs",
        "n_total",
    ]
    assert list(t["label"]) == ["bf16", "mxfp8_e4m3", "mxfp4_e2m1", "e4m3w-bf16a", "e4m3-fwd"]
    ref = t.iloc[0]
    assert ref["reference"] and ref["m_P"] == 1.0 and ref["n_pairs"] == 0 and np.isnan(ref["delta"])
    fp4 = t.set_index("label").loc["mxfp4_e2m1"]
    assert fp4["budget"] == 3e11 and fp4["seeds"] == 3 and fp4["n_pairs"] == 6 and fp4["significant"]
    assert fp4["ci_low"] <= fp4["m_P"] <= fp4["ci_high"] and fp4["n_runs"] == fp4["n_total"] == 27
    shown = lmstudy.display_law_table(t)
    assert list(shown.columns)[:2] == ["format", "m_P [95% CI]"]
    assert "Δ loss vs bf16 at C = 3e11 (mean ± sd over seeds)" in shown.columns
    assert shown.iloc[0]["m_P [95% CI]"] == "1 (reference)"
    no_fit = lmstudy.law_table(df, None)
    assert no_fit["m_P"].isna().all() and no_fit["delta"].notna().sum() == 4


def test_bit_ordering_on_the_recovered_law(law_fit):
    """m_P falls with the element width on synthetic data with m(fp4) = 0.45 < m(fp8) < 1: fp4's interval
    lies below fp8's; the hybrids (not plain W = A formats) are left out."""
    df, fit, _ = law_fit
    order = lmstudy.bit_ordering(lmstudy.law_table(df, fit), df)
    assert list(zip(order["bits"], order["bits_wider"], strict=True)) == [(4, 8), (8, 16)]
    four = order.iloc[0]
    assert four["labels"] == "mxfp4_e2m1" and four["labels_wider"] == "mxfp8_e4m3"
    assert four["separated"] and not four["reversed"] and four["high"] < four["low_wider"]
    assert "bf16a" not in ",".join(order["labels"]) and "fwd" not in ",".join(order["labels_wider"])


def test_bit_ordering_says_separated_overlap_and_reversed():
    df = pd.DataFrame(
        {
            "label": ["bf16", "a4", "b4", "c6", "d8"],
            "w": ["bf16", "fp4_e2m1", "nvfp4", "fp6_e2m3", "fp8_e4m3"],
            "a": ["bf16", "fp4_e2m1", "nvfp4", "fp6_e2m3", "fp8_e4m3"],
        }
    )
    table = pd.DataFrame(
        {
            "label": df["label"],
            "reference": [True, False, False, False, False],
            "hybrid": False,
            "ci_low": [1.0, 0.3, 0.35, 0.6, 0.5],
            "ci_high": [1.0, 0.4, 0.5, 0.9, 0.55],
        }
    )
    order = lmstudy.bit_ordering(table, df).set_index("bits")
    assert order.loc[4, "labels"] == "a4, b4" and order.loc[4, "separated"]  # 0.5 < 0.6
    assert order.loc[6, "reversed"] and not order.loc[6, "separated"]  # 8-bit [0.5, 0.55] below 6-bit's 0.6
    assert order.loc[8, "separated"]  # 0.55 < 1 (bf16)
    assert lmstudy.element_bits("nvfp4") == 4 and np.isnan(lmstudy.element_bits("nope"))


def test_fit_law_leaves_out_labels_with_one_point():
    df = frame(noise=0.001, seed_sd=0.002)
    lone = df[df["sweep.precision"] == "mxfp4_e2m1"].iloc[:3]  # 3 seeds of one (N, D)
    df = pd.concat([df[df["sweep.precision"] != "mxfp4_e2m1"], lone])
    fit, excluded = lmstudy.fit_law(df, n_boot=0)
    assert list(excluded) == ["mxfp4_e2m1"] and "mxfp4_e2m1" not in fit.multipliers
    assert lmstudy.fewer_budgets(df, ["bf16", "mxfp8_e4m3", "mxfp4_e2m1"], "bf16") == ["mxfp4_e2m1"]


def test_loss_vs_compute_takes_the_best_shape_per_seed():
    df = exact_frame()
    t = lmstudy.loss_vs_compute(df)
    assert len(t) == 6 and list(t["label"].unique()) == ["bf16", "same", "big"]
    r = t[(t["label"] == "big") & (t["budget"] == 1e11)].iloc[0]
    # best shape is d32 (smaller base); per seed: base + 0.05 + 0.01(s−1), base rises 0.02 per seed
    base = 3.0 - 1.1 + 0.02
    assert r["mean"] == pytest.approx(base + 0.02 + 0.05) and r["n_seeds"] == 3 and r["n_shapes"] == 2
    assert r["sd"] == pytest.approx(0.03) and r["N_best"] == SHAPES[(1, 32)]
    assert t["complete"].all()
    gone = (df["sweep.precision"] == "big") & (df["train.seed"] == 1) & (df["model.d_model"] == 32)
    t2 = lmstudy.loss_vs_compute(df.assign(status=np.where(gone, "diverged", "done")))
    assert list(t2.loc[~t2["complete"], "label"]) == ["big", "big"]  # one seed's best is over d48 only
    assert lmstudy.loss_vs_compute(df.assign(budget=np.nan)).empty
    # the figure marks those points hollow, and its key says why without calling a finished sweep
    # unfinished: here every run finished, one of them diverged
    fig = plots.loss_vs_compute_plot(t2)
    assert sum(c.get_gid() == "incomplete" for c in fig.axes[0].collections) == 1
    key = [t.get_text() for t in fig.legends[0].get_texts() if t.get_text().startswith("hollow")]
    assert len(key) == 1 and "unstable" in key[0] and "yet" not in key[0]


# ----------------------------------------------------------------------------------------------
# figures


def assert_readable(fig: Figure) -> None:
    """Rendered: every visible text lies inside the figure (no clipped title or label), no font is
    under 9 pt, no two tick labels of an axis run into each other, and a figure legend overlaps no axes
    (it covers nothing)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.text import Text

    canvas = FigureCanvasAgg(fig)
    canvas.draw()
    renderer = canvas.get_renderer()
    drawn = fig.get_tightbbox(renderer)  # inches: every drawn artist, titles and labels included
    w, h = fig.get_size_inches()
    assert drawn.x0 >= -0.01 and drawn.y0 >= -0.01 and drawn.x1 <= w + 0.01 and drawn.y1 <= h + 0.01, drawn
    for t in fig.findobj(Text):
        if t.get_visible() and t.get_text().strip():
            assert t.get_fontsize() >= 9, t
    for ax in fig.axes:
        for axis in (ax.xaxis, ax.yaxis):
            boxes = [t.get_window_extent(renderer) for t in axis.get_ticklabels() if t.get_text().strip()]
            for i, a in enumerate(boxes):
                assert not any(a.overlaps(b) for b in boxes[i + 1 :]), [
                    t.get_text() for t in axis.get_ticklabels()
                ]
    for legend in fig.legends:
        for ax in fig.axes:
            box = legend.get_window_extent(renderer)
            assert not box.overlaps(ax.get_window_extent(renderer))
            assert not box.overlaps(ax.title.get_window_extent(renderer)), ax.get_title()  # nor a title


def test_loss_vs_compute_plot_draws_every_precision_and_its_law(law_fit):
    df, fit, _ = law_fit
    table = lmstudy.loss_vs_compute(df)
    fig = plots.loss_vs_compute_plot(table, fit)
    assert isinstance(fig, Figure)
    ax = fig.axes[0]
    assert len(ax.containers) == 5  # one error-bar series per precision, one axis
    laws = [ln for ln in ax.lines if ln.get_gid() == "law"]
    assert len(laws) == 5
    # the law's compute-optimal loss lies at or below every best-of-shapes point (up to noise)
    for ln, label in zip(laws, ["bf16", "mxfp8_e4m3", "mxfp4_e2m1", "e4m3w-bf16a", "e4m3-fwd"], strict=True):
        pts = table[table["label"] == label]
        curve = np.interp(np.log(pts["budget"]), np.log(ln.get_xdata()), ln.get_ydata())
        assert (curve <= pts["mean"].to_numpy() + 0.01).all(), label
    assert len(fig.legends) == 1 and len(fig.legends[0].get_texts()) == 5 + 2
    assert len(plots.loss_vs_compute_plot(table).axes[0].lines) == sum(
        1 for ln in ax.lines if ln.get_gid() != "law"
    )
    assert_readable(fig)


def test_delta_heatmap_annotates_every_cell_run():
    d = lmstudy.deltas_vs_reference(frame())
    fig = plots.delta_heatmap(d)
    ax = fig.axes[0]
    texts = [t.get_text() for t in ax.texts]
    # mxfp8_e4m3, mxfp4_e2m1, e4m3w-bf16a + the reference cell; e4m3-fwd (forward-only) is left out
    assert len(texts) == 4 and sum("(ref)" in t for t in texts) == 1 and all("\n" in t for t in texts)
    assert [t.get_text() for t in ax.get_yticklabels()] == ["bf16", "fp8_e4m3", "fp4_e2m1"]
    assert [t.get_text() for t in ax.get_xticklabels()] == ["bf16", "fp8_e4m3", "fp4_e2m1"]
    lo, hi = ax.images[0].norm.vmin, ax.images[0].norm.vmax
    assert lo == -hi and len(fig.axes) == 2  # centred at 0, with a colour bar
    fp4 = next(t for t in texts if t.startswith("+") and float(t.split("\n")[0].rstrip("*")) > 0.05)
    assert fp4.split("\n")[0].endswith("*") and fp4.split("\n")[1].startswith("± ")
    assert_readable(fig)
    assert_readable(plots.delta_heatmap(d[d["label"] == "mxfp8_e4m3"]))  # 2 × 2: the title still fits


def test_multiplier_plot_sorts_formats(law_fit):
    _, fit, _ = law_fit
    fig = plots.multiplier_plot(fit)
    labels = [t.get_text().split()[0] for t in fig.axes[0].get_yticklabels()]
    m = [fit.multipliers[k] for k in labels]
    assert sorted(labels) == sorted(fit.multipliers) and m == sorted(m)
    assert_readable(fig)


# ----------------------------------------------------------------------------------------------
# the report


def make_lm_sweep(root: Path, formats=("bf16", "mxfp4_e2m1", "e4m3w-bf16a"), seeds=(0, 1)) -> int:
    """A small sweep directory as the sweeper writes it: run records (tests/test_analysis.write_run)
    named like lm_precisions' and a manifest.json giving each its named precision, budget and seed.
    Losses from the law plus a seed effect; the hybrid (m = 1) differs from bf16 by ±0.0005 by seed."""
    runs = []
    for label in formats:
        w, a, fwd, m = FORMATS[label]
        for C, shapes in LADDER.items():
            for shape in shapes:
                N = SHAPES[shape]
                for s in seeds:
                    name = f"{label}_C{C:.0e}_d{shape[1]}L{shape[0]}_s{s}"
                    wobble = 0.0005 * (-1) ** s if label == "e4m3w-bf16a" else 0.0  # mean Δ exactly 0
                    L = float(law(N, C / (6 * N), m) + 0.01 * s + wobble)
                    write_run(
                        root / name, N=N, D=C / (6 * N), loss=L, w=w, a=a, fwd_only=fwd, seed=s, n_metrics=3
                    )
                    runs.append({"name": name, "coords": {"precision": label, "C": C, "seed": s}})
    (root / "manifest.json").write_text(json.dumps({"name": "lm", "runs": runs}))
    return len(runs)


def test_report_leads_with_the_precision_law_and_delta_sections(tmp_path):
    from analysis.report import write_report

    sweep = tmp_path / "lm"
    n = make_lm_sweep(sweep)
    path = write_report(sweep, tmp_path / "out", bootstrap=10, log=lambda *_: None)
    text = path.read_text()
    heads = [line for line in text.splitlines() if line.startswith("## ")]
    assert heads[0].startswith("## Precision law") and heads[1].startswith("## Δ loss vs bf16")
    assert heads[2] == "## Runs"
    first_table = text.split("## Precision law")[1].split("\n## ")[0]
    assert "| format | m_P [95% CI] |" in first_table and "mxfp4_e2m1" in first_table
    delta = text.split("## Δ loss vs bf16")[1].split("\n## ")[0]
    assert "Significantly worse than bf16" in delta and "mxfp4_e2m1 (+" in delta
    assert "e4m3w-bf16a is within noise of bf16" in delta
    fj = json.loads((tmp_path / "out" / "fits.json").read_text())
    law_ = fj["precision_law"]
    assert law_["reference"] == "bf16" and law_["multipliers"]["mxfp4_e2m1"] < 0.8 and law_["n_runs"] == n
    assert {r["label"] for r in fj["deltas"]["all_budgets"]} == {"mxfp4_e2m1", "e4m3w-bf16a"}
    assert all(r["budget"] == 3e11 for r in fj["deltas"]["largest_budget"])
    for name in ("loss_vs_compute.png", "precision_multipliers.png", "delta_vs_bf16.png"):
        assert (tmp_path / "out" / "figures" / name).stat().st_size > 10_000, name
        assert f"figures/{name}" in text


def test_sections_are_silent_without_budgets_and_brief_without_bf16(tmp_path):
    from analysis.report import _Report

    r = _Report([tmp_path], tmp_path, "final_val_loss", 0, 0, lambda *_: None)
    proxy = exact_frame()
    proxy = proxy[proxy["sweep.precision"] != "bf16"]
    for budget in (np.nan, 6.45e12):  # none, or one grouped from C (a proxy recipe at one length)
        r.precision_law_section(proxy.assign(budget=budget))
        r.delta_section(proxy.assign(budget=budget))
    assert r.lines == []
    assert lmstudy.is_compute_sweep(proxy) and lmstudy.is_compute_sweep(proxy.assign(**{"sweep.C": 1e11}))
    assert not lmstudy.is_compute_sweep(proxy.assign(budget=6.45e12, **{"sweep.C": None}))
    no_ref = frame(formats={k: FORMATS[k] for k in ("mxfp8_e4m3", "mxfp4_e2m1")})
    r.precision_law_section(no_ref)
    r.delta_section(no_ref)
    prose = [line for line in r.lines if line and not line.startswith("#")]
    assert len(prose) == 2 and all("bf16" in line for line in prose)
    assert r.fits["precision_law"] == {} and r.fits["deltas"] == {}


# ----------------------------------------------------------------------------------------------
# one format against another (results 3.2)


def test_contrast_tests_a_gap_one_sided_and_an_equivalence_by_tost():
    df = exact_frame()  # "big" = bf16 + 0.05 ± 0.01 by seed; "same" = bf16 ± 0.001
    big = lmstudy.contrast(df, "big", "same")
    assert big["n_pairs"] == 12 and big["seeds"] == 3 and big["seeds_above"] == 3
    assert big["mean"] == pytest.approx(0.05) and big["p_greater"] < 1e-6
    assert big["ci90"][0] < 0.05 < big["ci90"][1] and math.isnan(big["p_equivalent"])
    # over the per-seed means (0.04, 0.05, 0.06): the same one-sided t-test on 3 values
    assert big["p_seeds"] == pytest.approx(
        stats.ttest_1samp([0.04, 0.05, 0.06], 0, alternative="greater").pvalue
    )
    # the other way round the one-sided test finds nothing (p near 1), where a two-sided one would
    assert lmstudy.contrast(df, "same", "big")["p_greater"] > 0.99
    # two-sided, for a contrast with no predicted direction: small both ways round
    assert lmstudy.contrast(df, "same", "big")["p_two_sided"] == pytest.approx(2 * big["p_greater"])
    # |Δ| ≈ 0.001 around 0: equivalent at ±0.01, not at ±0.0005 (the margin is inside the spread)
    same = lmstudy.contrast(df, "same", "bf16", margin=0.01)
    assert abs(same["mean"]) < 1e-12 and same["p_equivalent"] < 1e-6
    assert -0.01 < same["ci90"][0] < same["ci90"][1] < 0.01
    assert math.isnan(same["p_seeds"])  # every seed's mean Δ is exactly 0: no spread, no test
    assert lmstudy.contrast(df, "same", "bf16", margin=0.0005)["p_equivalent"] > 0.05
    assert lmstudy.contrast(df, "big", "bf16", margin=0.01)["p_equivalent"] > 0.99  # 0.05 away
    # a gap of gaps: (big − bf16) − (same − bf16) = big − same, on runs matched across all four
    did = lmstudy.contrast(df, "big", "bf16", minus=("same", "bf16"))
    assert did["n_pairs"] == 12 and did["mean"] == pytest.approx(0.05) and did["p_greater"] < 1e-6
    assert lmstudy.contrast(df, "big", "same", minus=("big", "bf16"))["mean"] == pytest.approx(0.0, abs=1e-12)
    assert lmstudy.contrast(df, "big", "bf16", minus=("same", "mxfp6_e2m3"))["n_pairs"] == 0
    # a format with no runs (a sweep still running): no pairs, no p, no exception
    none = lmstudy.contrast(df, "big", "mxfp6_e2m3")
    assert none["n_pairs"] == 0 and math.isnan(none["p_greater"]) and math.isnan(none["mean"])


def test_format_error_plot_dodges_formats_of_equal_error():
    pts = pd.DataFrame(
        [  # label, bits, error, sample, mean, sd
            ("mxfp6_e2m3", 6, 8.0e-4, "seeds 0–2", 0.008, 0.006),
            ("mxfp8_e5m2", 8, 2.925e-3, "seeds 0–2", 0.023, 0.013),
            ("mxfp6_e3m2", 6, 2.9255e-3, "seeds 0–2", 0.023, 0.012),
            ("mxfp6_e2m3", 6, 8.0e-4, "seeds 3–8", 0.006, 0.004),
            ("mxfp8_e5m2", 8, 2.925e-3, "seeds 3–8", 0.021, 0.011),
            ("mxfp6_e3m2", 6, 2.9255e-3, "seeds 3–8", 0.020, 0.010),
        ],
        columns=["label", "bits", "error", "sample", "mean", "sd"],
    )
    fig = plots.format_error_plot(pts)
    ax = fig.axes[0]
    xs = [float(c.lines[0].get_xdata()[0]) for c in ax.containers]
    assert len(xs) == 6  # drawn per sample in the rows' order: e5m2 and e3m2 at 1, 2 and 4, 5
    for a, b in ((1, 2), (4, 5)):  # equal errors, yet visibly apart (> 10 % in x), neither hidden
        assert max(xs[a], xs[b]) / min(xs[a], xs[b]) > 1.1
    assert xs[0] != xs[3]  # one format's two samples side by side too
    notes = [t.get_text() for t in ax.texts]
    assert sorted(notes) == ["mxfp6_e2m3", "mxfp8_e5m2\nmxfp6_e3m2"]  # equal errors: one note
    assert ax.get_xscale() == "log" and ax.get_yscale() == "log"
    legend = [t.get_text() for t in fig.legends[0].get_texts()]
    assert legend == ["seeds 0–2", "seeds 3–8", "6 bits per element", "8 bits per element"]
    assert_readable(fig)
    empty = plots.format_error_plot(pts.iloc[:0])
    assert "no block formats" in empty.axes[0].texts[0].get_text()
    assert_readable(empty)


MX4 = {  # the four formats of results 3.2, all at m = 1: their gaps come from ``offsets``
    "bf16": ("bf16", "bf16", False, 1.0),
    "mxfp8_e4m3": ("fp8_e4m3", "fp8_e4m3", False, 1.0),
    "mxfp8_e5m2": ("fp8_e5m2", "fp8_e5m2", False, 1.0),
    "mxfp6_e2m3": ("fp6_e2m3", "fp6_e2m3", False, 1.0),
    "mxfp6_e3m2": ("fp6_e3m2", "fp6_e3m2", False, 1.0),
}


def test_format_error_section_judges_the_predictions_on_the_fresh_seeds_only(tmp_path):
    from analysis.results.common import NOT_RUN, PARTIAL, REPRODUCED, Source, _Doc
    from analysis.results.preregistered import preregistered_section
    from analysis.results.preregistered_claims import FORMAT_ERROR

    def source(name, seeds, offsets):
        src = Source(name, f"python launch.py -m experiment={name}", tmp_path / name)
        src.df = frame(formats=MX4, seeds=seeds, offsets=offsets, rng_seed=len(seeds))
        return src

    as_predicted = {"mxfp6_e2m3": 0.008, "mxfp8_e4m3": 0.015, "mxfp8_e5m2": 0.023, "mxfp6_e3m2": 0.023}
    explore = source("lm_precisions", (0, 1, 2), as_predicted)
    doc = _Doc(tmp_path / "docs" / "results.md")
    preregistered_section(doc, FORMAT_ERROR, source("lm_format_error", (3, 4, 5, 6), as_predicted), explore)
    text = "\n".join(doc.lines)
    assert f"**{REPRODUCED.capitalize()}.**" in text and "H1, H2, H3, H4 held." in text
    assert "| H3 | mxfp8_e5m2 ≡ mxfp6_e3m2 (±0.0075) | 1.00 | lm_format_error (seeds 3–6) |" in text
    assert (tmp_path / "docs" / "figures" / "lm_format_error.png").exists()
    # E3M2 as good as E2M3 on the fresh seeds: H1 and H3 fail there, H2 holds → partially; the
    # exploratory rows still say yes (the verdict reads the fresh seeds only)
    doc = _Doc(tmp_path / "docs" / "results.md")
    fresh = source("lm_format_error", (3, 4, 5, 6), {**as_predicted, "mxfp6_e3m2": 0.008})
    preregistered_section(doc, FORMAT_ERROR, fresh, explore)
    text = "\n".join(doc.lines)
    assert f"**{PARTIAL.capitalize()}.**" in text and "H2, H4 held; H1, H3 did not." in text
    rows = [line for line in text.splitlines() if line.startswith("| H")]
    assert sum("lm_precisions (seeds 0–2) | 27 |" in r and r.endswith("| yes |") for r in rows) == 4
    # Δ vs bf16 in the order of the closed-form error, both samples side by side
    order = [line.split(" | ")[0][2:] for line in text.splitlines() if line.startswith("| mxfp")]
    assert order[-4:] == ["mxfp6_e2m3", "mxfp8_e4m3", "mxfp8_e5m2", "mxfp6_e3m2"]
    doc = _Doc(tmp_path / "docs" / "results.md")
    preregistered_section(doc, FORMAT_ERROR, Source("lm_format_error", "cmd", tmp_path / "none"), explore)
    assert f"**{NOT_RUN.capitalize()}.**" in "\n".join(doc.lines)


def test_scale_rule_section_reads_each_runs_rule_and_skips_what_the_old_sample_lacks(tmp_path):
    from analysis.results.common import REPRODUCED, Source, _Doc
    from analysis.results.preregistered import preregistered_section
    from analysis.results.preregistered_claims import SCALE_RULE

    formats = {k: MX4[k] for k in ("bf16", "mxfp8_e4m3", "mxfp6_e2m3")}
    formats |= {"mxfp8_e4m3_ceil": MX4["mxfp8_e4m3"], "mxfp6_e2m3_ceil": MX4["mxfp6_e2m3"]}
    formats |= {
        "mxfp4_e2m1": FORMATS["mxfp4_e2m1"][:3] + (1.0,),
        "mxfp4_e2m1_ceil": FORMATS["mxfp4_e2m1"][:3] + (1.0,),
    }
    offsets = {"mxfp8_e4m3": 0.015, "mxfp8_e4m3_ceil": 0.005, "mxfp6_e2m3": 0.010, "mxfp6_e2m3_ceil": 0.010,
               "mxfp4_e2m1": 0.10, "mxfp4_e2m1_ceil": 0.10}  # fmt: skip
    fresh = Source("lm_scale_rule", "python launch.py -m experiment=lm_scale_rule", tmp_path / "r")
    df = frame(formats=formats, seeds=(9, 10, 11, 12), offsets=offsets, rng_seed=9)
    fresh.df = df.assign(
        **{"precision.scale_rule": np.where(df["sweep.precision"].str.endswith("_ceil"), "ceil", "floor")}
    )
    # two bf16 runs measured by train.tensor_error: ceil doubles E2M1's flushed values, leaves its MSE
    paths = []
    for i, flushed in enumerate((0.2, 0.3)):
        run = tmp_path / "r" / f"bf16_{i}"
        run.mkdir(parents=True)
        row = {"step": 10}
        for o in ("W", "X", "X_T", "dY", "dY_T"):
            for f in ("fp8_e4m3", "fp6_e2m3", "fp4_e2m1", "fp8_e5m2"):
                for rule, k in (("floor", 1.0), ("ceil", 2.0 if f == "fp4_e2m1" else 1.0)):
                    row |= {f"rel_mse/{o}/{f}/{rule}": 0.01, f"flushed/{o}/{f}/{rule}": flushed * k}
        (run / "tensor_error.jsonl").write_text(json.dumps(row) + "\n")
        paths.append(str(run))
    is_bf16 = fresh.df["sweep.precision"].eq("bf16")
    fresh.df["path"] = np.where(is_bf16, paths[0], "nowhere")
    fresh.df.loc[is_bf16 & fresh.df["train.seed"].eq(10), "path"] = paths[1]
    old = Source("lm_precisions", "cmd", tmp_path / "old")  # has no ceil runs: no exploratory rows
    old.df = frame(formats=MX4, seeds=(0, 1, 2))
    doc = _Doc(tmp_path / "docs" / "results.md")
    preregistered_section(doc, SCALE_RULE, fresh, old)
    text = "\n".join(doc.lines)
    assert f"**{REPRODUCED.capitalize()}.**" in text and "G1, G2, G3 held; G4 did not." in text
    rows = [line for line in text.splitlines() if line.startswith("| G")]
    assert len(rows) == 4 and all("lm_scale_rule (seeds 9–12)" in r for r in rows)
    # the error ratio comes from each run's own scale rule: E4M3 floor over ceil 1.27, E2M3 ≈ 1
    assert "| G1 | mxfp8_e4m3 worse than mxfp8_e4m3_ceil | 1.27 |" in text
    assert "| G3 | mxfp6_e2m3 ≡ mxfp6_e2m3_ceil (±0.003) | 1.00 |" in text
    assert "| G4 | mxfp4_e2m1_ceil worse than mxfp4_e2m1 | 1.02 |" in text
    # where the model predicts ~no gap (errors within 5 %), the measured one is stated with its interval
    even = next(line for line in text.splitlines() if line.startswith("Where the two formats"))
    assert "G3 " in even and "; G4 " in even and "G1" not in even and "G2" not in even
    assert (tmp_path / "docs" / "figures" / "lm_scale_rule.png").exists()
    # the trained tensors' table: the formats and rules trained here only (not E5M2), medians over runs
    assert "**The trained models' own tensors**" in text and "2 bf16 runs' final weights" in text
    table = [line for line in text.splitlines() if line.startswith("| fp")]
    assert [r.split(" | ")[0][2:] + "/" + r.split(" | ")[1] for r in table] == [
        f"{f}/{rule}" for f in ("fp8_e4m3", "fp6_e2m3", "fp4_e2m1") for rule in ("floor", "ceil")
    ]
    assert table[-1].endswith("| 0.500 |")  # ceil, median of 0.4 and 0.6
    assert "fp4_e2m1: MSE ×1.00–1.00 (Gaussian ×1.023), flushed ×2.00–2.00" in text


def test_grad_sr_section_needs_its_first_prediction_and_skips_the_bf16_figure(tmp_path):
    from analysis.results.common import NOT, PARTIAL, REPRODUCED, Source, _Doc
    from analysis.results.preregistered import preregistered_section
    from analysis.results.preregistered_claims import GRAD_SR

    e2m1 = FORMATS["mxfp4_e2m1"][:3] + (1.0,)
    labels = ("mxfp4_e2m1", "mxfp4_e2m1_ceil", "mxfp4_e2m1_sr", "mxfp4_e2m1_ceil_sr")

    def section(offsets):
        src = Source("lm_grad_sr", "python launch.py -m experiment=lm_grad_sr", tmp_path / "sr")
        df = frame(formats=dict.fromkeys(labels, e2m1), seeds=(15, 16, 17), offsets=offsets, rng_seed=15)
        name = df["sweep.precision"]
        src.df = df.assign(**{
            "precision.scale_rule": np.where(name.str.contains("ceil"), "ceil", "floor"),
            "precision.grad_rounding": np.where(name.str.endswith("_sr"), "stochastic", None),
        })  # fmt: skip
        doc = _Doc(tmp_path / "docs" / "results.md")
        preregistered_section(doc, GRAD_SR, src)
        return "\n".join(doc.lines)

    # ceil +0.2 with nearest rounding, +0.05 with stochastic: S1 and S2 hold, SR (on its own) too
    text = section({"mxfp4_e2m1_ceil": 0.2, "mxfp4_e2m1_ceil_sr": 0.05})
    assert f"**{REPRODUCED.capitalize()}.**" in text
    assert "| S2 | mxfp4_e2m1_ceil − mxfp4_e2m1 exceeds mxfp4_e2m1_ceil_sr − mxfp4_e2m1_sr | – |" in text
    s2 = next(line for line in text.splitlines() if line.startswith("| S2 |")).split(" | ")
    assert float(s2[5].split(" ± ")[0]) == pytest.approx(0.15, abs=0.005)  # the gap of gaps, 0.2 − 0.05
    assert not (tmp_path / "docs" / "figures" / "lm_grad_sr.png").exists()  # no bf16: no Δ-vs-bf16 figure
    # the measured rows hold nothing, test two-sided, and their stochastic runs get no closed-form ratio
    measured = [line for line in text.splitlines() if line.startswith(("| SR |", "| best |"))]
    assert len(measured) == 2 and all(
        r.endswith("| – |") and "(measured, no prediction) | – |" in r for r in measured
    )
    assert "On the fresh seeds: S1, S2 held." in text
    # stochastic rounding changes nothing: S1 alone → partially
    assert f"**{PARTIAL.capitalize()}.**" in section({"mxfp4_e2m1_ceil": 0.2, "mxfp4_e2m1_ceil_sr": 0.2})
    # no excess to explain: S1 fails → not, even where the gaps' difference comes out positive
    assert f"**{NOT.capitalize()}.**" in section({"mxfp4_e2m1_ceil": 0.0, "mxfp4_e2m1_ceil_sr": -0.1})


def test_block_geometry_resolves_recipes_and_records_without_the_per_tensor_scale():
    e2m1 = FORMATS["mxfp4_e2m1"][:3] + (1.0,)
    labels = {"bf16": FORMATS["bf16"], "nvfp4": ("nvfp4", "nvfp4", False, 1.0), "b8": e2m1, "old": e2m1}
    df = frame(formats=labels, seeds=(0,))
    geometry = {"b8": (8, "ue4m3", True), "old": (32, "ue5m3", np.nan)}  # "old": written before the field
    for key, col in enumerate(("precision.block_size", "precision.scale", "precision.global_scale")):
        df[col] = [geometry.get(x, (32, "e8m0", False))[key] for x in df["sweep.precision"]]
    g = lmstudy.block_geometry(df)
    assert sorted(g.index) == ["b8", "nvfp4", "old"]  # bf16 is not a block format
    assert g["name"].to_dict() == {
        "nvfp4": "fp4_e2m1-bs16-ue4m3-global",  # the recipe's own geometry, not the recorded defaults
        "b8": "fp4_e2m1-bs8-ue4m3-global",
        "old": "fp4_e2m1-ue5m3",
    }


def _block_section(sweep, spec, geometry, mse, seeds, flushed):
    """``section(offsets)``: the text of ``spec``'s section on a frame of bf16 and E2M1 in each geometry
    (label → (block, scale, per-tensor scale[, scale rule: floor where left out])) with those loss
    offsets, whose bf16 run ``train.tensor_error`` measured with ``mse`` per geometry (every operand
    alike) and ``flushed`` (one value, or one per geometry)."""
    from analysis.results.common import Source, _Doc
    from analysis.results.preregistered import preregistered_section
    from records.precision import block_name

    e2m1 = FORMATS["mxfp4_e2m1"][:3] + (1.0,)
    run = sweep / "bf16_0"
    run.mkdir(parents=True)
    row = {"step": 10}
    rules = {label: (*g, "floor")[3] for label, g in geometry.items()}
    shares = flushed if isinstance(flushed, tuple) else (flushed,) * len(mse)
    for (label, g), m, f in zip(geometry.items(), mse, shares, strict=True):
        name = block_name("fp4_e2m1", *g[:3])  # train.tensor_error's keys
        for o in ("W", "X", "X_T", "dY", "dY_T"):
            row |= {f"rel_mse/{o}/{name}/{rules[label]}": m, f"flushed/{o}/{name}/{rules[label]}": f}
    (run / "tensor_error.jsonl").write_text(json.dumps(row) + "\n")

    def section(offsets, unstable=None):  # unstable: label → how many of its runs spiked for good
        src = Source(spec.preset, f"python launch.py -m experiment={spec.preset}", sweep)
        formats = {"bf16": FORMATS["bf16"], **dict.fromkeys(geometry, e2m1)}
        df = frame(formats=formats, seeds=seeds, offsets=offsets, rng_seed=seeds[0])
        for label, n in (unstable or {}).items():
            df.loc[df.index[df["sweep.precision"].eq(label)][:n], "unstable"] = True
        for key, col in enumerate(("precision.block_size", "precision.scale", "precision.global_scale")):
            df[col] = [geometry.get(x, (32, "e8m0", False))[key] for x in df["sweep.precision"]]
        df["precision.scale_rule"] = [rules.get(x, "floor") for x in df["sweep.precision"]]
        src.df = df.assign(path=np.where(df["sweep.precision"].eq("bf16"), str(run), "nowhere"))
        doc = _Doc(run.parent.parent / "docs" / "results.md")
        preregistered_section(doc, spec, src)
        return "\n".join(doc.lines)

    return section


def test_block_scale_section_prices_by_the_tensors_and_draws_the_block_sizes(tmp_path):
    from analysis.results.common import NOT, PARTIAL, REPRODUCED
    from analysis.results.preregistered_claims import BLOCK_SCALE

    geometry = {  # label → (block, scale, per-tensor scale)
        "nvfp4_bs8": (8, "ue4m3", True), "nvfp4": (16, "ue4m3", True), "nvfp4_bs32": (32, "ue4m3", True),
        "ue5m3_bs8": (8, "ue5m3", False), "ue5m3_bs16": (16, "ue5m3", False),
        "ue5m3_bs32": (32, "ue5m3", False),
    }  # fmt: skip
    # the bf16 run measured by train.tensor_error: finer is better under the per-tensor scale, worse alone
    mse = (0.006, 0.008, 0.010, 0.015, 0.013, 0.012)
    section = _block_section(tmp_path / "bs", BLOCK_SCALE, geometry, mse, seeds=(21, 22, 23), flushed=0.1)

    as_predicted = {"nvfp4_bs8": 0.06, "nvfp4": 0.08, "nvfp4_bs32": 0.10,
                    "ue5m3_bs8": 0.20, "ue5m3_bs16": 0.15, "ue5m3_bs32": 0.12}  # fmt: skip
    text = section(as_predicted)
    assert f"**{REPRODUCED.capitalize()}.**" in text and "B1, B2, B3, B4 held." in text
    # error ratios from the tensors: B1 0.010/0.008, B4 0.013/0.008; a gap of gaps has none
    assert "| B1 | nvfp4_bs32 worse than nvfp4 | 1.25 |" in text
    assert "| B4 | ue5m3_bs16 worse than nvfp4 | 1.62 |" in text
    assert "| B3 | ue5m3_bs8 − ue5m3_bs32 exceeds nvfp4_bs8 − nvfp4_bs32 | – |" in text
    b3 = next(line for line in text.splitlines() if line.startswith("| B3 |")).split(" | ")
    assert float(b3[5].split(" ± ")[0]) == pytest.approx(0.12, abs=0.005)  # (0.20 − 0.12) − (0.06 − 0.10)
    table = [line for line in text.splitlines() if line.startswith("| UE") and line.split(" | ")[1].isdigit()]
    assert [r.split(" | ")[2] for r in table] == list(geometry)
    assert table[0].startswith("| UE4M3 + per-tensor scale | 8 |") and table[0].endswith("| 0.0060 |")
    assert table[3].startswith("| UE5M3 alone | 8 |")
    header = "| family | block | label | Δ vs bf16 (mean ± sd over seeds) | relative MSE (own tensors) |"
    assert header in text  # the table's own columns, no more
    starts = ("| UE4M3 + per-tensor scale | nvfp4_bs8 −", "| UE5M3 alone | ue5m3_bs8 −")
    shapes = [line for line in text.splitlines() if line.startswith(starts)]
    assert len(shapes) == 2 * len({(d, w) for sh in LADDER.values() for d, w in sh})
    assert (tmp_path / "docs" / "figures" / "lm_block_scale.png").exists()
    # the trained tensors' table lists the six geometries trained, no Gaussian for float scales
    rows = [line for line in text.splitlines() if line.startswith("| fp4_e2m1")]
    assert len(rows) == 6 and all(r.split(" | ")[2] == "–" for r in rows)
    assert "Ceil over floor" not in text
    # what the section argues from is computed, operand by operand: 0.013 / 0.008 and 0.1 / 0.1
    assert (
        "ue5m3_bs16 over nvfp4 on these tensors, operand by operand: MSE W ×1.62, X ×1.62, X_T ×1.62, "
        "dY ×1.62, dY_T ×1.62; flushed W ×1.00, X ×1.00, X_T ×1.00, dY ×1.00, dY_T ×1.00." in text
    )
    # finer helps UE5M3 alone as much as under the per-tensor scale: B3 fails, and with it the claim
    text = section({**as_predicted, "ue5m3_bs8": 0.08, "ue5m3_bs16": 0.10, "ue5m3_bs32": 0.12})
    assert f"**{NOT.capitalize()}.**" in text
    # B3 holds but blocks of 8 do not beat 16 under the per-tensor scale: partially
    text = section({**as_predicted, "nvfp4_bs8": 0.08})
    assert f"**{PARTIAL.capitalize()}.**" in text and "B2 did not" in text


def _rows(text, *starts):
    """The first three cells of the Markdown table rows of ``text`` that start with one of ``starts``."""
    return [line.split(" | ")[:3] for line in text.splitlines() if line.startswith(starts)]


def test_block_global_section_judges_ue5m3_under_a_per_tensor_scale_against_nvfp4(tmp_path):
    from analysis.results.common import NOT, PARTIAL, REPRODUCED
    from analysis.results.preregistered import _unstable
    from analysis.results.preregistered_claims import BLOCK_GLOBAL

    geometry = {
        "nvfp4": (16, "ue4m3", True), "ue5m3_bs16": (16, "ue5m3", False),
        "ue5m3_global_bs8": (8, "ue5m3", True), "ue5m3_global_bs16": (16, "ue5m3", True),
        "ue5m3_global_bs32": (32, "ue5m3", True),
    }  # fmt: skip
    mse = (0.0080, 0.013, 0.006, 0.0081, 0.010)  # as train.tensor_error measured them on the bf16 run
    section = _block_section(tmp_path / "bg", BLOCK_GLOBAL, geometry, mse, seeds=(33, 34, 35), flushed=0.15)

    as_predicted = {"nvfp4": 0.10, "ue5m3_bs16": 0.55, "ue5m3_global_bs8": 0.07, "ue5m3_global_bs16": 0.10,
                    "ue5m3_global_bs32": 0.16}  # fmt: skip
    text = section(as_predicted)
    assert f"**{REPRODUCED.capitalize()}.**" in text and "E1, E2, E3 held." in text
    assert "| E2 | ue5m3_global_bs16 ≡ nvfp4 (±0.0075) | 1.01 |" in text  # 0.0081 / 0.0080
    assert "within 5 % of each other the model predicts a gap near 0; measured (Δ [90 % CI]): E2 " in text
    families = _rows(text, "| UE")
    assert families[:5] == [  # by scale format, each with its per-tensor scale first, whatever the labels
        ["| UE4M3 + per-tensor scale", "16", "nvfp4"],
        *(["| UE5M3 + per-tensor scale", str(b), f"ue5m3_global_bs{b}"] for b in (8, 16, 32)),
        ["| UE5M3 alone", "16", "ue5m3_bs16"],
    ]  # fmt: skip
    assert "ue5m3_global_bs16 over nvfp4 on these tensors, operand by operand: MSE W ×1.01" in text
    assert "No finished run was unstable." in text
    assert _unstable(pd.DataFrame({"label": ["bf16"], "final_val_loss": [2.0]})).endswith("not on record.")
    # runs that spiked for good are counted where the verdict stands, and left out of every Δ
    text = section(as_predicted, unstable={"ue5m3_bs16": 12, "bf16": 1})
    assert (
        "Runs left out of every Δ as unstable (diverged, or a loss spike the run did not recover from): "
        "bf16 1 of 27, ue5m3_bs16 12 of 27; none of the others." in text
    )
    assert (
        "| E1 | ue5m3_bs16 worse than ue5m3_global_bs16 | 1.60 | lm_block_global (seeds 33–35) | 15 |" in text
    )
    assert (tmp_path / "docs" / "figures" / "lm_block_global.png").exists()
    # UE5M3 under the per-tensor scale still trails NVFP4: partially
    text = section({**as_predicted, "ue5m3_global_bs16": 0.15})
    assert f"**{PARTIAL.capitalize()}.**" in text and "E2 did not" in text
    # the per-tensor scale does not help UE5M3: E1 fails, and with it the claim
    assert f"**{NOT.capitalize()}.**" in section({**as_predicted, "ue5m3_global_bs16": 0.60})


def test_block_e8m0_section_sets_the_flushed_share_against_the_mse(tmp_path):
    from analysis.results.common import NOT, PARTIAL, REPRODUCED
    from analysis.results.preregistered_claims import BLOCK_E8M0

    geometry = {
        "mxfp4_e2m1_bs8": (8, "e8m0", False), "mxfp4_e2m1_bs16": (16, "e8m0", False),
        "mxfp4_e2m1": (32, "e8m0", False), "nvfp4": (16, "ue4m3", True),
    }  # fmt: skip
    mse = (0.0160, 0.0159, 0.0159, 0.0088)  # finer E8M0 blocks: the MSE flat
    section = _block_section(tmp_path / "be", BLOCK_E8M0, geometry, mse, seeds=(39, 40, 41), flushed=0.1)
    as_predicted = {"mxfp4_e2m1_bs8": 0.12, "mxfp4_e2m1_bs16": 0.15, "mxfp4_e2m1": 0.20, "nvfp4": 0.10}
    text = section(as_predicted)
    assert f"**{REPRODUCED.capitalize()}.**" in text and "F1, F2, F3 held." in text
    assert "| F1 | mxfp4_e2m1 worse than mxfp4_e2m1_bs8 | 0.99 |" in text  # 0.0159 / 0.0160
    assert "the model predicts a gap near 0; measured (Δ [90 % CI]): F1 " in text
    table = _rows(text, "| E8M0 alone")
    assert [t[1:] for t in table[:3]] == [
        ["8", "mxfp4_e2m1_bs8"],
        ["16", "mxfp4_e2m1_bs16"],
        ["32", "mxfp4_e2m1"],
    ]
    assert "mxfp4_e2m1_bs8 over mxfp4_e2m1 on these tensors, operand by operand: MSE W ×1.01" in text
    # finer blocks help from 32 to 8 but not from 32 to 16: partially
    text = section({**as_predicted, "mxfp4_e2m1_bs16": 0.21})
    assert f"**{PARTIAL.capitalize()}.**" in text and "F2 did not" in text
    # the MSE was right, finer E8M0 blocks do not help: F1 fails, and with it the claim
    flat = {**as_predicted, "mxfp4_e2m1_bs8": 0.20, "mxfp4_e2m1_bs16": 0.20}
    assert f"**{NOT.capitalize()}.**" in section(flat)


def test_block_ceil_section_sets_the_rules_side_by_side_at_each_block_size(tmp_path):
    from analysis.results.common import NOT, PARTIAL, REPRODUCED
    from analysis.results.preregistered_claims import BLOCK_CEIL

    def label(rule, b):
        return f"mxfp4_e2m1{'_ceil' if rule == 'ceil' else ''}{'' if b == 32 else f'_bs{b}'}"

    geometry = {label(rule, b): (b, "e8m0", False, rule) for rule in ("floor", "ceil") for b in (8, 16, 32)}
    # as measured before the sweep: floor's MSE flat, ceil's falling; ceil flushes more at every size
    mse = (0.0163, 0.0159, 0.0159, 0.0124, 0.0135, 0.0148)
    flushed = (0.093, 0.118, 0.144, 0.120, 0.150, 0.180)
    section = _block_section(tmp_path / "bc", BLOCK_CEIL, geometry, mse, seeds=(45, 46, 47), flushed=flushed)
    loss = (0.13, 0.13, 0.15, 0.18, 0.24, 0.33)  # floor 8/16/32, ceil 8/16/32
    as_predicted = dict(zip(geometry, loss, strict=True))
    text = section(as_predicted)
    assert f"**{REPRODUCED.capitalize()}.**" in text and "C1, C2, C3, C4 held." in text
    assert "| C1 | mxfp4_e2m1_ceil worse than mxfp4_e2m1_ceil_bs8 | 1.19 |" in text  # 0.0148 / 0.0124
    assert "| C4 | mxfp4_e2m1_ceil_bs8 worse than mxfp4_e2m1_bs8 | 0.76 |" in text  # the MSE says the reverse
    c2 = next(line for line in text.splitlines() if line.startswith("| C2 |")).split(" | ")
    assert float(c2[5].split(" ± ")[0]) == pytest.approx(0.13, abs=0.005)  # (0.33 − 0.18) − (0.15 − 0.13)
    # both rules' families, floor first, each block size once; the ceil family in words
    table = _rows(text, "| E8M0 alone")
    assert [(t[0][2:], t[1]) for t in table[:6]] == [
        (family, str(b)) for family in ("E8M0 alone", "E8M0 alone, ceil rule") for b in (8, 16, 32)
    ]
    # the tensor table holds each rule's rows; ceil over floor is stated per block size
    assert "mxfp4_e2m1-bs8: MSE ×0.76–0.76" in text and "flushed ×1.29–1.29" in text
    assert "mxfp4_e2m1_ceil_bs8 over mxfp4_e2m1_bs8 on these tensors, operand by operand: MSE W ×0.76" in text
    assert (tmp_path / "docs" / "figures" / "lm_block_ceil.png").exists()
    # ceil stops at 16 as floor did: C3 fails, partially
    text = section({**as_predicted, "mxfp4_e2m1_ceil_bs16": 0.18})
    assert f"**{PARTIAL.capitalize()}.**" in text and "C3 did not" in text
    # at 8 the lower MSE wins: C4 fails, partially
    assert "C4 did not" in section({**as_predicted, "mxfp4_e2m1_ceil_bs8": 0.10, "mxfp4_e2m1_ceil_bs16": 0.2})
    # finer blocks do not help under ceil: C1 fails, and with it the claim
    flat = {**as_predicted, "mxfp4_e2m1_ceil_bs8": 0.33, "mxfp4_e2m1_ceil_bs16": 0.33}
    assert f"**{NOT.capitalize()}.**" in section(flat)


def test_block_size_training_plot_puts_each_family_on_the_block_sizes():
    pts = pd.DataFrame(
        [
            ("UE4M3 + per-tensor scale", b, f"g{b}", m, 0.005, np.nan)
            for b, m in ((8, 0.06), (16, 0.08), (32, 0.1))
        ]
        + [("UE5M3 alone", b, f"u{b}", m, 0.01, np.nan) for b, m in ((8, 0.2), (16, 0.15), (32, 0.12))],
        columns=["family", "block", "label", "mean", "sd", "error"],
    )
    fig = plots.block_size_training_plot(pts)
    ax = fig.axes[0]
    assert [t.get_text() for t in ax.get_xticklabels()] == ["8", "16", "32"]
    assert [t.get_text() for t in fig.legends[0].get_texts()] == ["UE4M3 + per-tensor scale", "UE5M3 alone"]
    ys = [list(c.lines[0].get_ydata()) for c in ax.containers]
    assert ys == [[0.06, 0.08, 0.1], [0.2, 0.15, 0.12]]  # finest first, per family
    assert_readable(fig)

    # a family keeps its colour in every figure (results 3.5–3.7), whichever families come before it
    def colours(frame):
        return {
            c.get_label(): c.lines[0].get_color()
            for c in plots.block_size_training_plot(frame).axes[0].containers
        }

    five = pts[pts["family"] != "UE5M3 alone"]
    seven = pd.concat(
        [five, five.assign(family="UE5M3 + per-tensor scale"), pts[pts["family"] == "UE5M3 alone"]]
    )
    assert (
        colours(seven)["UE5M3 alone"]
        == colours(pts)["UE5M3 alone"]
        != colours(seven)["UE5M3 + per-tensor scale"]
    )
    other = colours(pts.replace("UE5M3 alone", "UE4M3 alone"))
    assert len(set(other.values())) == 2  # an unknown family takes a spare style
    empty = plots.block_size_training_plot(pts.iloc[:0])
    assert "no block formats" in empty.axes[0].texts[0].get_text()
    assert_readable(empty)


def test_gradients_kept_in_high_precision_make_a_hybrid_and_keep_their_geometry():
    e2m1 = FORMATS["mxfp4_e2m1"][:3] + (1.0,)
    labels = {"bf16": FORMATS["bf16"], "fp4": e2m1, "fp4_bf16g": e2m1, "fp4_e5m2g": e2m1}
    df = frame(formats=labels, seeds=(0,))
    grads = {"fp4_bf16g": "bf16", "fp4_e5m2g": "fp8_e5m2"}
    df["precision.g_dgrad"] = [grads.get(x) for x in df["sweep.precision"]]
    info = lmstudy.label_info(df)
    assert info["grads"].dropna().to_dict() == {"fp4_bf16g": "bf16", "fp4_e5m2g": "fp8_e5m2"}
    # bf16 gradients are a hybrid (out of the 3.1 law's plain formats); gradients in another block format
    # (OCP's E4M3-forward, E5M2-gradient recipe) are not
    assert lmstudy.hybrid_labels(df) == ["fp4_bf16g"]
    assert sorted(lmstudy.block_geometry(df).index) == ["fp4", "fp4_e5m2g"]
    g = lmstudy.block_geometry(df, gradients=True)
    assert g["grads"].to_dict() == {"fp4": "fp4_e2m1", "fp4_bf16g": "bf16", "fp4_e5m2g": "fp8_e5m2"}
    assert (g["name"] == "fp4_e2m1").all()  # the forward geometry, whatever the gradients


def test_block_grads_section_splits_each_family_by_its_gradients(tmp_path):
    from analysis.results.common import NOT, PARTIAL, REPRODUCED, Source, _Doc
    from analysis.results.preregistered import preregistered_section
    from analysis.results.preregistered_claims import BLOCK_GRADS

    e2m1 = FORMATS["mxfp4_e2m1"][:3] + (1.0,)
    geometry = {"nvfp4": ("ue4m3", True), "nvfp4_bf16g": ("ue4m3", True), "ue5m3_bs16": ("ue5m3", False),
                "ue5m3_bs16_bf16g": ("ue5m3", False)}  # fmt: skip

    def section(offsets):
        src = Source("lm_block_grads", "python launch.py -m experiment=lm_block_grads", tmp_path / "bg")
        df = frame(formats={"bf16": FORMATS["bf16"], **dict.fromkeys(geometry, e2m1)}, seeds=(27, 28, 29),
                   offsets=offsets, rng_seed=27)  # fmt: skip
        df["precision.block_size"] = [16 if x in geometry else 32 for x in df["sweep.precision"]]
        df["precision.scale"] = [geometry.get(x, ("e8m0",))[0] for x in df["sweep.precision"]]
        df["precision.global_scale"] = [geometry.get(x, (0, False))[1] for x in df["sweep.precision"]]
        df["precision.g_dgrad"] = ["bf16" if x.endswith("_bf16g") else None for x in df["sweep.precision"]]
        src.df = df
        doc = _Doc(tmp_path / "docs" / "results.md")
        preregistered_section(doc, BLOCK_GRADS, src)
        return "\n".join(doc.lines)

    as_predicted = {"nvfp4": 0.10, "nvfp4_bf16g": 0.05, "ue5m3_bs16": 0.55, "ue5m3_bs16_bf16g": 0.05}
    text = section(as_predicted)
    assert f"**{REPRODUCED.capitalize()}.**" in text and "D1, D2, D3 held." in text
    assert "| D3 | ue5m3_bs16_bf16g ≡ nvfp4_bf16g (±0.0075) | – |" in text  # no one tensor price
    table = [line for line in text.splitlines() if line.startswith(("| UE4M3", "| UE5M3"))]
    assert [r.split(" | ")[2] for r in table] == list(geometry)
    assert [r.split(" | ")[3] for r in table] == ["fp4_e2m1 (the family's)", "bf16"] * 2
    share = next(line for line in text.splitlines() if line.startswith("The share of each family's"))
    assert "UE4M3 + per-tensor scale 50 %" in share and "UE5M3 alone 91 %" in share
    assert (tmp_path / "docs" / "figures" / "lm_block_grads.png").exists()
    # bf16 gradients help UE5M3 alone, but the families still differ without them: partially
    assert f"**{PARTIAL.capitalize()}.**" in section({**as_predicted, "ue5m3_bs16_bf16g": 0.2})
    # bf16 gradients do not help UE5M3 alone: D1 fails, and with it the claim
    assert f"**{NOT.capitalize()}.**" in section({**as_predicted, "ue5m3_bs16_bf16g": 0.55})


def test_block_grads_fresh_section_replicates_d3_beside_the_seeds_it_failed_on(tmp_path):
    from analysis.results.common import NOT, PARTIAL, REPRODUCED, Source, _Doc
    from analysis.results.preregistered import preregistered_section
    from analysis.results.preregistered_claims import BLOCK_GRADS_FRESH

    e2m1 = FORMATS["mxfp4_e2m1"][:3] + (1.0,)
    geometry = {"nvfp4_bf16g": ("ue4m3", True), "ue5m3_bs16_bf16g": ("ue5m3", False),
                "ue5m3_global_bs16_bf16g": ("ue5m3", True)}  # fmt: skip

    def source(preset, seeds, offsets):  # bf16 and the geometries ``offsets`` names, gradients in bf16
        src = Source(preset, f"python launch.py -m experiment={preset}", tmp_path / preset)
        formats = {"bf16": FORMATS["bf16"], **dict.fromkeys(offsets, e2m1)}
        df = frame(formats=formats, seeds=seeds, offsets=offsets, rng_seed=seeds[0])
        df["precision.block_size"] = [16 if x in geometry else 32 for x in df["sweep.precision"]]
        df["precision.scale"] = [geometry.get(x, ("e8m0",))[0] for x in df["sweep.precision"]]
        df["precision.global_scale"] = [geometry.get(x, (0, False))[1] for x in df["sweep.precision"]]
        df["precision.g_dgrad"] = [None if x == "bf16" else "bf16" for x in df["sweep.precision"]]
        src.df = df
        return src

    # 3.6's seeds: UE5M3 alone 0.03 above NVFP4, and no run under a per-tensor scale
    old = source("lm_block_grads", (27, 28, 29), {"nvfp4_bf16g": 0.05, "ue5m3_bs16_bf16g": 0.08})

    def section(offsets):
        doc = _Doc(tmp_path / "docs" / "results.md")
        preregistered_section(
            doc, BLOCK_GRADS_FRESH, source("lm_block_grads_fresh", (51, 52, 53), offsets), old
        )
        return "\n".join(doc.lines)

    alike = dict.fromkeys(geometry, 0.05)
    text = section(alike)
    assert f"**{REPRODUCED.capitalize()}.**" in text and "R1, R2 held." in text
    rows = [line.split(" | ") for line in text.splitlines() if line.startswith(("| R1 |", "| R2 |"))]
    # R1 on both samples (the exploratory one fails it), R2 on the fresh seeds only
    assert [(r[0], r[3], r[-1]) for r in rows] == [
        ("| R1", "lm_block_grads (seeds 27–29)", "no |"),
        ("| R1", "lm_block_grads_fresh (seeds 51–53)", "yes |"),
        ("| R2", "lm_block_grads_fresh (seeds 51–53)", "yes |"),
    ]
    assert "partially when some do; not when none does" in text  # no prediction must hold first
    table = [line.split(" | ")[:4] for line in text.splitlines() if line.startswith(("| UE4M3", "| UE5M3"))]
    assert [(r[0][2:], r[2], r[3]) for r in table] == [
        ("UE4M3 + per-tensor scale", "nvfp4_bf16g", "bf16"),
        ("UE5M3 + per-tensor scale", "ue5m3_global_bs16_bf16g", "bf16"),
        ("UE5M3 alone", "ue5m3_bs16_bf16g", "bf16"),
    ]
    assert (tmp_path / "docs" / "figures" / "lm_block_grads_fresh.png").exists()
    # the residual is real: R1 fails again, R2 holds → partially; both fail → not
    text = section({**alike, "ue5m3_bs16_bf16g": 0.08})
    assert f"**{PARTIAL.capitalize()}.**" in text and "R1 did not" in text
    assert f"**{NOT.capitalize()}.**" in section({**alike, "nvfp4_bf16g": 0.0})


def _sr_section(spec, labels, seeds, run):
    """``section(offsets, spec=spec)``: the text of a stochastic-rounding section (3.11–3.16) on a
    frame of bf16 and ``labels`` (NVFP4 where the name starts so, E2M1 otherwise; blocks of 8 or 16
    where it says `bs8` or `bs16`, the ceil rule where it says `_ceil`, on the gradients alone where it
    says `_gceil`, SR gradients where it ends in `_sr`), whose bf16 runs
    live in ``run`` (measured by ``train.tensor_error`` where it holds its file); the document in
    ``run``'s grandparent."""
    from analysis.results.common import Source, _Doc
    from analysis.results.preregistered import preregistered_section

    e2m1 = FORMATS["mxfp4_e2m1"][:3] + (1.0,)
    nvfp4 = ("nvfp4", "nvfp4", False, 1.0)
    formats = {"bf16": FORMATS["bf16"]} | {x: nvfp4 if x.startswith("nvfp4") else e2m1 for x in labels}

    def section(offsets, spec=spec):
        src = Source(spec.preset, f"python launch.py -m experiment={spec.preset}", run.parent)
        df = frame(formats=formats, seeds=seeds, offsets=offsets, rng_seed=seeds[0])
        name = df["sweep.precision"]
        src.df = df.assign(**{
            "precision.block_size": np.select(
                [name.str.contains("bs8"), name.str.contains("bs16")], [8, 16], 32
            ),
            "precision.scale_rule": np.where(name.str.contains("_ceil"), "ceil", "floor"),
            "precision.grad_scale_rule": np.where(name.str.contains("_gceil"), "ceil", None),
            "precision.grad_rounding": np.where(name.str.endswith("_sr"), "stochastic", None),
            "path": np.where(name.eq("bf16"), str(run), "nowhere"),
        })  # fmt: skip
        doc = _Doc(run.parent.parent / "docs" / "results.md")
        preregistered_section(doc, spec, src)
        return "\n".join(doc.lines)

    return section


def test_grad_sr_recipes_section_splits_each_format_by_its_gradients_rounding(tmp_path):
    from analysis.results.common import NOT, PARTIAL, REPRODUCED
    from analysis.results.preregistered_claims import GRAD_SR_RECIPES

    labels = ("nvfp4", "nvfp4_sr", "mxfp4_e2m1_ceil_sr", "mxfp4_e2m1_ceil_bs8", "mxfp4_e2m1_ceil_bs8_sr")
    section = _sr_section(GRAD_SR_RECIPES, labels, (57, 58, 59), tmp_path / "r" / "bf16_0")

    # as predicted: SR removes ceil's cost at 32 and costs NVFP4 and ceil at 8
    predicted = {"nvfp4": 0.10, "nvfp4_sr": 0.12, "mxfp4_e2m1_ceil_sr": 0.07,
                 "mxfp4_e2m1_ceil_bs8": 0.12, "mxfp4_e2m1_ceil_bs8_sr": 0.14}  # fmt: skip
    text = section(predicted)
    assert f"**{REPRODUCED.capitalize()}.**" in text and "T1, T2, T3 held." in text
    # each format by its family and block size, coarsest first, rounded to nearest before stochastically
    table = _rows(text, "| E8M0", "| UE4M3")
    assert [(r[0][2:], r[1], r[2]) for r in table] == [
        ("E8M0 alone, ceil rule, blocks of 32", "mxfp4_e2m1_ceil_sr", "stochastic"),
        ("E8M0 alone, ceil rule, blocks of 8", "mxfp4_e2m1_ceil_bs8", "to nearest"),
        ("E8M0 alone, ceil rule, blocks of 8", "mxfp4_e2m1_ceil_bs8_sr", "stochastic"),
        ("UE4M3 + per-tensor scale, blocks of 16", "nvfp4", "to nearest"),
        ("UE4M3 + per-tensor scale, blocks of 16", "nvfp4_sr", "stochastic"),
    ]
    # SR's effect per format where both roundings ran, from matched runs: +0.02 each
    effects = next(line for line in text.splitlines() if line.startswith("Stochastic minus nearest"))
    means = [float(m) for m in re.findall(r"of \d+ ([+-][\d.]+) \[", effects)]
    assert means == pytest.approx([0.02, 0.02], abs=0.002) and "blocks of 32" not in effects
    assert (tmp_path / "docs" / "figures" / "lm_grad_sr_recipes.png").exists()
    # SR helps everywhere (T2, T3 fail) → partially; and nothing holds → not
    helps = {**predicted, "nvfp4_sr": 0.06, "mxfp4_e2m1_ceil_bs8_sr": 0.06}
    text = section(helps)
    assert f"**{PARTIAL.capitalize()}.**" in text and "T1 held; T2, T3 did not." in text
    assert f"**{NOT.capitalize()}.**" in section({**helps, "mxfp4_e2m1_ceil_sr": 0.2})


def test_grad_sr_clamp_section_decides_on_floor_at_8_and_shows_the_norm_index(tmp_path):
    import dataclasses

    from analysis.results.common import NOT, PARTIAL, REPRODUCED
    from analysis.results.preregistered_claims import GRAD_SR_CLAMP
    from records.precision import block_name

    # one measured bf16 run: floor shrinks the tensors (norm < 1), more at 8; NVFP4 keeps their size
    run = tmp_path / "clamp" / "bf16_0"
    run.mkdir(parents=True)
    row = {"step": 10}
    for geometry, (mse, flushed, norm) in {
        ("fp4_e2m1", 32, "e8m0", False): (0.018, 0.21, 0.960),
        ("fp4_e2m1", 8, "e8m0", False): (0.018, 0.12, 0.948),
        ("fp4_e2m1", 16, "ue4m3", True): (0.008, 0.15, 1.001),
    }.items():
        for o in ("W", "X", "dY", "X_T", "dY_T"):
            key = f"{o}/{block_name(*geometry)}/floor"
            row |= {f"rel_mse/{key}": mse, f"flushed/{key}": flushed, f"norm/{key}": norm}
    (run / "tensor_error.jsonl").write_text(json.dumps(row) + "\n")
    labels = ("nvfp4", "nvfp4_sr", "mxfp4_e2m1", "mxfp4_e2m1_sr", "mxfp4_e2m1_bs8", "mxfp4_e2m1_bs8_sr")
    section = _sr_section(GRAD_SR_CLAMP, labels, (63, 64, 65), run)

    predicted = {"nvfp4": 0.11, "nvfp4_sr": 0.06, "mxfp4_e2m1": 0.15, "mxfp4_e2m1_sr": 0.17,
                 "mxfp4_e2m1_bs8": 0.13, "mxfp4_e2m1_bs8_sr": 0.16}  # fmt: skip
    text = section(predicted)
    assert f"**{REPRODUCED.capitalize()}.**" in text and "V1, V2, V3 held." in text
    # floor at 32 prices by its tensors against NVFP4's; a run with SR gradients has no price
    assert "| V3 | nvfp4 worse than nvfp4_sr | – |" in text
    assert "| finer | mxfp4_e2m1 − mxfp4_e2m1_bs8 (measured, no prediction) | 1.00 |" in text
    # the tensor table carries the norm index the claim argues from, per operand
    header = next(line for line in text.splitlines() if line.startswith("| format | rule |"))
    assert "| norm dY |" in header and "norm: ‖Q(t)‖/‖t‖" in text
    floor8 = next(line for line in text.splitlines() if line.startswith("| mxfp4_e2m1-bs8 | floor |"))
    assert floor8.count("| 0.948 ") == 5
    assert "mxfp4_e2m1_bs8 over nvfp4 on these tensors, operand by operand: MSE W ×2.25" in text
    # without the index in ``metrics`` the table is as every other section's
    plain = section(predicted, dataclasses.replace(GRAD_SR_CLAMP, metrics=("rel_mse", "flushed")))
    assert "norm dY" not in plain and "norm:" not in plain and "| flushed dY |" in plain
    # SR helps floor at 8 as it helps NVFP4: the deciding prediction fails, whatever V1 does
    assert f"**{NOT.capitalize()}.**" in section({**predicted, "mxfp4_e2m1_bs8_sr": 0.08})
    # SR costs floor at 8 but no longer helps NVFP4: partially
    text = section({**predicted, "nvfp4_sr": 0.12})
    assert f"**{PARTIAL.capitalize()}.**" in text and "V1, V2 held; V3 did not." in text


def test_grad_sr_gceil_section_names_the_gradients_rule_and_shows_both_rules_tensors(tmp_path):
    from analysis.results.common import NOT, PARTIAL, REPRODUCED
    from analysis.results.preregistered_claims import GRAD_SR_GCEIL

    run = tmp_path / "gceil" / "bf16_0"
    run.mkdir(parents=True)
    row = {"step": 10}
    for rule, (mse, flushed, norm) in {"floor": (0.018, 0.21, 0.960), "ceil": (0.015, 0.25, 1.002)}.items():
        for o in ("W", "X", "dY", "X_T", "dY_T"):
            row |= {f"rel_mse/{o}/fp4_e2m1/{rule}": mse, f"flushed/{o}/fp4_e2m1/{rule}": flushed}
            row |= {f"norm/{o}/fp4_e2m1/{rule}": norm}
    (run / "tensor_error.jsonl").write_text(json.dumps(row) + "\n")
    labels = ("mxfp4_e2m1", "mxfp4_e2m1_sr", "mxfp4_e2m1_gceil", "mxfp4_e2m1_gceil_sr")
    section = _sr_section(GRAD_SR_GCEIL, labels, (69, 70, 71), run)

    predicted = {
        "mxfp4_e2m1": 0.15,
        "mxfp4_e2m1_sr": 0.17,
        "mxfp4_e2m1_gceil": 0.25,
        "mxfp4_e2m1_gceil_sr": 0.08,
    }
    text = section(predicted)
    assert f"**{REPRODUCED.capitalize()}.**" in text and "W1, W2, W3 held." in text
    # the family names the gradients' rule; both rules' tensors are in the table, ceil over floor stated
    table = _rows(text, "| E8M0")
    assert [(r[0][2:], r[1], r[2]) for r in table] == [
        ("E8M0 alone, blocks of 32", "mxfp4_e2m1", "to nearest"),
        ("E8M0 alone, blocks of 32", "mxfp4_e2m1_sr", "stochastic"),
        ("E8M0 alone, ceil rule on the gradients, blocks of 32", "mxfp4_e2m1_gceil", "to nearest"),
        ("E8M0 alone, ceil rule on the gradients, blocks of 32", "mxfp4_e2m1_gceil_sr", "stochastic"),
    ]
    assert "| fp4_e2m1 | floor |" in text and "| fp4_e2m1 | ceil |" in text
    assert "fp4_e2m1: MSE ×0.83–0.83" in text
    # a run whose gradients differ from its forward's rule has no single price: only floor's is priced
    assert "| W3 | mxfp4_e2m1_gceil worse than mxfp4_e2m1 | – |" in text
    # SR still costs with ceil gradients: the deciding prediction fails
    assert f"**{NOT.capitalize()}.**" in section({**predicted, "mxfp4_e2m1_gceil_sr": 0.27})
    # SR helps, but ceil gradients cost nothing with nearest rounding: partially
    text = section({**predicted, "mxfp4_e2m1_gceil": 0.15, "mxfp4_e2m1_gceil_sr": 0.08})
    assert f"**{PARTIAL.capitalize()}.**" in text and "W1, W2 held; W3 did not." in text


def test_grad_sr_forward_section_tests_equivalence_of_the_forward_rules(tmp_path):
    from analysis.results.common import NOT, PARTIAL, REPRODUCED
    from analysis.results.preregistered_claims import GRAD_SR_FORWARD

    labels = ("nvfp4_sr", "mxfp4_e2m1_ceil_sr", "mxfp4_e2m1_gceil_sr")
    section = _sr_section(GRAD_SR_FORWARD, labels, (75, 76, 77), tmp_path / "fwd" / "bf16_0")
    predicted = {"nvfp4_sr": 0.060, "mxfp4_e2m1_ceil_sr": 0.068, "mxfp4_e2m1_gceil_sr": 0.068}
    text = section(predicted)
    assert f"**{REPRODUCED.capitalize()}.**" in text and "X1, X2 held." in text
    assert "| X1 | mxfp4_e2m1_ceil_sr ≡ mxfp4_e2m1_gceil_sr (±0.0075) |" in text
    # every point has stochastic gradients: the figure says so, and no SR-minus-nearest line
    assert "Stochastic minus nearest" not in text
    table = _rows(text, "| E8M0", "| UE4M3")
    assert [r[2] for r in table] == ["stochastic"] * 3
    assert (tmp_path / "docs" / "figures" / "lm_grad_sr_forward.png").exists()
    # NVFP4 no longer ahead: partially; the forward's rule matters: not
    text = section({**predicted, "nvfp4_sr": 0.068})
    assert f"**{PARTIAL.capitalize()}.**" in text and "X2 did not" in text
    assert f"**{NOT.capitalize()}.**" in section({**predicted, "mxfp4_e2m1_gceil_sr": 0.10})


def test_grad_sr_blocks_section_sets_the_recipe_at_each_block_size_beside_nvfp4(tmp_path):
    from analysis.results.common import NOT, PARTIAL, REPRODUCED
    from analysis.results.preregistered_claims import GRAD_SR_BLOCKS

    # Δ vs bf16 by label: finer blocks help the recipe, NVFP4 stays ahead of it at every block size
    predicted = dict(nvfp4_sr=0.06, mxfp4_e2m1_gceil_sr=0.075, mxfp4_e2m1_bs16_gceil_sr=0.068,
                     mxfp4_e2m1_bs8_gceil_sr=0.066)  # fmt: skip
    section = _sr_section(GRAD_SR_BLOCKS, tuple(predicted), (81, 82, 83), tmp_path / "blk" / "bf16_0")
    text = section(predicted)
    assert f"**{REPRODUCED.capitalize()}.**" in text and "Z1, Z2, Z3 held." in text
    # one family at three block sizes, coarsest first, then NVFP4; every point's gradients stochastic
    table = _rows(text, "| E8M0", "| UE4M3")
    assert [r[1] for r in table] == [
        "mxfp4_e2m1_gceil_sr", "mxfp4_e2m1_bs16_gceil_sr", "mxfp4_e2m1_bs8_gceil_sr", "nvfp4_sr"
    ]  # fmt: skip
    assert table[1][0] == "| E8M0 alone, ceil rule on the gradients, blocks of 16"
    assert [r[2] for r in table] == ["stochastic"] * 4
    assert "| 16 → 8 | mxfp4_e2m1_bs16_gceil_sr − mxfp4_e2m1_bs8_gceil_sr (measured" in text
    assert (tmp_path / "docs" / "figures" / "lm_grad_sr_blocks.png").exists()
    assert "Over the per-seed mean Δ (the stricter check) the same predictions hold." in text
    assert "by block format, every run's gradients rounded stochastically:" in text
    assert "![Δ vs bf16 by block format, every run's gradients rounded stochastically]" in text
    # the recipe catches NVFP4 at 8 but not at 16: partially; at 16 too: not (Z2 decides)
    text = section({**predicted, "mxfp4_e2m1_bs8_gceil_sr": 0.055})
    assert f"**{PARTIAL.capitalize()}.**" in text and "Z1, Z2 held; Z3 did not." in text
    assert f"**{NOT.capitalize()}.**" in section({**predicted, "mxfp4_e2m1_bs16_gceil_sr": 0.055})


def test_grad_sr_equiv_section_decides_on_equivalence_alone(tmp_path):
    from analysis.results.common import NOT, REPRODUCED
    from analysis.results.preregistered_claims import GRAD_SR_EQUIV

    labels = ("nvfp4_sr", "mxfp4_e2m1_gceil_sr")
    section = _sr_section(GRAD_SR_EQUIV, labels, (87, 88, 89), tmp_path / "eq" / "bf16_0")
    text = section({"nvfp4_sr": 0.060, "mxfp4_e2m1_gceil_sr": 0.061})
    assert f"**{REPRODUCED.capitalize()}.**" in text and "On the fresh seeds: Q1 held." in text
    assert "| Q1 | mxfp4_e2m1_gceil_sr ≡ nvfp4_sr (±0.0075) |" in text
    assert "Rule: reproduced when Q1 holds; not when Q1 fails." in text
    # a gap past the margin either way: not
    assert f"**{NOT.capitalize()}.**" in section({"nvfp4_sr": 0.060, "mxfp4_e2m1_gceil_sr": 0.075})
    assert f"**{NOT.capitalize()}.**" in section({"nvfp4_sr": 0.075, "mxfp4_e2m1_gceil_sr": 0.060})


def test_seed_check_gives_the_verdict_again_over_the_seed_means():
    """A prediction that holds over the runs but not over the per-seed means (runs of a seed are not
    independent) is named, with the verdict the seed means would give; where they agree, one line."""
    from analysis.results.common import NOT, PARTIAL
    from analysis.results.preregistered import _seed_check
    from analysis.results.preregistered_claims import GRAD_SR_BLOCKS

    held = {"Z1": True, "Z2": True, "Z3": True}
    assert _seed_check(GRAD_SR_BLOCKS, held, held) == (
        "Over the per-seed mean Δ (the stricter check) the same predictions hold."
    )
    text = _seed_check(GRAD_SR_BLOCKS, held, {**held, "Z3": False})
    assert "Z1, Z2 held (Z3 changed)" in text and text.endswith(f"would be {PARTIAL}.")
    text = _seed_check(GRAD_SR_BLOCKS, {**held, "Z1": False}, {"Z1": True, "Z2": False, "Z3": True})
    assert "Z1, Z3 held (Z1, Z2 changed)" in text and text.endswith(f"would be {NOT}.")


def test_gradient_format_plot_sets_each_family_beside_its_high_precision_gradients():
    pts = pd.DataFrame(
        [("UE4M3 + per-tensor scale", "fp4_e2m1 (the family's)", True, 0.1, 0.01),
         ("UE4M3 + per-tensor scale", "bf16", False, 0.05, 0.01),
         ("UE5M3 alone", "fp4_e2m1 (the family's)", True, 0.55, 0.04),
         ("UE5M3 alone", "bf16", False, 0.05, 0.01)],
        columns=["family", "gradients", "own", "mean", "sd"],
    )  # fmt: skip
    fig = plots.gradient_format_plot(pts)
    ax = fig.axes[0]
    ticks = [t.get_text().replace("\n", " ") for t in ax.get_xticklabels()]  # long names on two lines
    assert ticks == ["UE4M3 + per-tensor scale", "UE5M3 alone"]
    legend = [t.get_text() for t in fig.legends[0].get_texts()]
    assert legend == ["gradients in the family's format", "gradients in bf16"]
    ys = [list(c.lines[0].get_ydata()) for c in ax.containers]
    assert ys == [[0.1, 0.55], [0.05, 0.05]]
    assert_readable(fig)
    # three families with their gradients in bf16 alone (results 3.10): centred, labels that fit
    means = {"UE4M3 + per-tensor scale": 0.05, "UE5M3 + per-tensor scale": 0.05, "UE5M3 alone": 0.06}
    kept = pd.DataFrame(
        [(f, "bf16", False, m, 0.005) for f, m in means.items()],
        columns=["family", "gradients", "own", "mean", "sd"],
    )
    fig = plots.gradient_format_plot(kept)
    assert list(fig.axes[0].containers[0].lines[0].get_xdata()) == [0, 1, 2]
    assert "in bf16" in fig.axes[0].get_title()
    assert_readable(fig)
    # the kinds named by the caller (results 3.11: how the gradients were rounded), with its own title
    fig = plots.gradient_format_plot(
        pts, kinds=("rounded to nearest", "rounded stochastically"), title="Nearest or stochastic"
    )
    assert [t.get_text() for t in fig.legends[0].get_texts()] == [
        "rounded to nearest",
        "rounded stochastically",
    ]
    assert fig.axes[0].get_title() == "Nearest or stochastic"
    assert_readable(fig)
    empty = plots.gradient_format_plot(pts.iloc[:0])
    assert "no block formats" in empty.axes[0].texts[0].get_text()


# ----------------------------------------------------------------------------------------------
# loss spikes against the LR (results 1.6, lm_spikes)


def _spikes_frame(unstable: dict[str, int]) -> pd.DataFrame:
    """lm_spikes' shape: bf16, MXFP8 E5M2 and E4M3 at lr 0.01, 0.1, 1 on seeds 95–100, one shape at one
    budget; ``unstable[label]`` of the label's lr-1 seeds (the first ones) spiked and never recovered,
    their final val loss 0.5 higher. The loss rises with the LR; E4M3 sits +0.01 and E5M2 +0.02 above
    bf16; one bf16 run ends 0.01 above its best val loss."""
    rows = []
    for label, (w, off) in {"bf16": ("bf16", 0.0), "mxfp8_e5m2": ("fp8_e5m2", 0.02),
                            "mxfp8_e4m3": ("fp8_e4m3", 0.01)}.items():  # fmt: skip
        for lr in (0.01, 0.1, 1.0):
            for k, s in enumerate(range(95, 101)):
                bad = lr == 1.0 and k < unstable.get(label, 0)
                L = 1.7 + 0.2 * math.log10(lr / 0.01) + off + 0.003 * k + (0.5 if bad else 0.0)
                rows.append({
                    "sweep.precision": label, "precision": f"{w}/{w}", "w": w, "a": w, "fwd_only": False,
                    "train.seed": s, "train.lr": lr, "model.depth": 2, "model.d_model": 48, "N": 80304,
                    "budget": 2e12, "steps": 2026, "tokens_per_param": 51.7, "status": "done",
                    "spiked": bad or (label == "bf16" and k == 5), "diverged": False, "unstable": bad,
                    "final_val_loss": L,
                    "min_val_loss": L - (0.01 if label == "bf16" and lr == 0.1 and k == 0 else 0.0),
                })  # fmt: skip
    return pd.DataFrame(rows)


def test_spikes_claim_judges_the_lr_scan_by_its_paired_predictions(tmp_path):
    from analysis.results.common import NOT, PARTIAL, REPRODUCED, Source, _Doc
    from analysis.results.lm import spikes_claim

    lm = Source("lm_precisions", "python launch.py -m experiment=lm_precisions", tmp_path / "lm")
    lm.df = exact_frame().assign(
        **{"train.lr": 3e-3, "spiked": False, "diverged": False, "tokens_per_param": 5.0}
    )

    pilot = Source("lm_spikes_pilot", "python launch.py -m experiment=lm_spikes_pilot", tmp_path / "pilot")
    bf16 = _spikes_frame({})
    bf16 = bf16[bf16["sweep.precision"].eq("bf16") & bf16["train.seed"].eq(95)]
    pilot.df = bf16.iloc[::-1].assign(**{"train.seed": 0})  # any order: the line sorts by LR

    clamp = Source("lm_spikes_clamp", "python launch.py -m experiment=lm_spikes_clamp", tmp_path / "clamp")
    c = _spikes_frame({"mxfp8_e4m3": 6})  # lr 1: full MX unstable in 6 of 6
    c = c[c["train.lr"].eq(1.0) & c["sweep.precision"].ne("mxfp8_e5m2")]
    fixes = {"mxfp8_e4m3_ceil": False, "e4m3w-bf16a": False, "e4m3-fwd": True}  # unstable as full MX?
    others = [c[c["sweep.precision"].eq("mxfp8_e4m3")].assign(**{"sweep.precision": k, "unstable": v})
              for k, v in fixes.items()]  # fmt: skip
    clamp.df = pd.concat([c, *others], ignore_index=True)

    def claim(unstable, scan=True):
        src = Source("lm_spikes", "python launch.py -m experiment=lm_spikes", tmp_path / "spikes")
        if scan:
            src.df = _spikes_frame(unstable)
        doc = _Doc(tmp_path / "docs" / "results.md")
        spikes_claim(doc, lm, src, pilot, clamp)
        return "\n".join(doc.lines)

    text = claim({"mxfp8_e5m2": 6, "mxfp8_e4m3": 1})
    assert f"**{PARTIAL.capitalize()}.**" in text and "pre-registered in `lm_spikes`" in text
    rows = [line.split(" | ") for line in text.splitlines() if line.startswith(("| U1 ", "| U2 "))]
    # prediction, unstable, where not, pairs, both, first alone, second alone, neither, p, held
    assert [r[1:8] for r in rows] == [["mxfp8_e5m2", "bf16", "18", "0", "6", "0", "12"],
                                      ["mxfp8_e4m3", "bf16", "18", "0", "1", "0", "17"]]  # fmt: skip
    assert rows[0][8] == f"{0.5**6:.2g}" and rows[0][9] == "yes |" and rows[1][9] == "no |"
    assert "N = 80.3k parameters, trained 2,026 steps (D/N = 52) at lr 0.01, 0.1, 1; seeds 95–100" in text
    assert "`python launch.py -m experiment=lm_spikes_pilot`" in text
    assert (
        "bf16 alone, seed 0: final val loss 1.700 / 1.900 / 2.100 at lr 0.01 / 0.1 / 1; unstable in 0 of 3."
        in text
    )
    scan = text.split("What averts")[0]  # the scan's own table (the clamp block has one too)
    lines = [line for line in scan.splitlines() if line.startswith(("| 0.01 ", "| 0.1 ", "| 1 "))]
    by_lr = {(r[0][2:], r[1]): r for r in (line.split(" | ") for line in lines)}
    assert len(by_lr) == 9
    # lr 1: every run counts in the loss and Δ, unstable ones (0.5 higher) included
    assert (
        by_lr[("1", "mxfp8_e5m2")][3:5] == ["6", "0"]
        and by_lr[("1", "mxfp8_e5m2")][8] == "+0.5200 ± 0.0000 |"
    )
    assert by_lr[("1", "mxfp8_e4m3")][8] == f"+{0.01 + 0.5 / 6:.4f} ± {0.5 / 6**0.5:.4f} |"  # one of six
    assert by_lr[("0.1", "bf16")][6] == "1" and by_lr[("0.01", "bf16")][5] == "1"  # above its best; recovered
    assert (tmp_path / "docs" / "figures" / "lm_spikes_lr.png").exists()
    # what averts it: K1–K4 each on its own, full MX against bf16, ceil and the two fixes
    assert "What averts the blow-up, at lr 1 on fresh seeds 95–100: `python launch.py" in text
    assert "Held: K1, K2, K3." in text
    k = [line.split(" | ") for line in text.splitlines() if line.startswith("| K")]
    assert [(r[0][2:], r[2], r[5], r[6], r[9]) for r in k] == [
        ("K1", "bf16", "6", "0", "yes |"), ("K2", "mxfp8_e4m3_ceil", "6", "0", "yes |"),
        ("K3", "e4m3w-bf16a", "6", "0", "yes |"), ("K4", "e4m3-fwd", "0", "0", "no |"),
    ]  # fmt: skip
    # the first look at lm_precisions' one LR follows, with its own command
    assert "The first look, at one LR (0.003): `python launch.py -m experiment=lm_precisions`" in text
    assert f"**{REPRODUCED.capitalize()}.**" in claim({"mxfp8_e5m2": 6, "mxfp8_e4m3": 5})
    assert f"**{NOT.capitalize()}.**" in claim({"mxfp8_e5m2": 4, "mxfp8_e4m3": 4, "bf16": 4})
    # without the scan, the first look's own rule decides (nothing unstable there)
    text = claim({}, scan=False)
    assert f"**{NOT.capitalize()}.** Rule: reproduced when MX runs spike" in text
    assert "The first look" not in text and "experiment=lm_precisions" in text


def test_lr_scan_plot_marks_unstable_runs_and_puts_every_precision_on_one_axis():
    d = _spikes_frame({"mxfp8_e5m2": 2})
    points = lmstudy.label_column(d).assign(lr=d["train.lr"], seed=d["train.seed"])
    fig = plots.lr_scan_plot(points[["label", "lr", "seed", "final_val_loss", "unstable"]])
    ax = fig.axes[0]
    assert ax.get_xscale() == "log" and [t.get_text() for t in ax.get_xticklabels()] == ["0.01", "0.1", "1"]
    names = [t.get_text() for t in fig.legends[0].get_texts()]
    assert names == ["bf16", "mxfp8_e5m2", "mxfp8_e4m3", "an unstable run (2 in all)"]
    crosses = [line for line in ax.lines if line.get_marker() == "x"]
    assert len(crosses) == 1 and len(crosses[0].get_xdata()) == 2
    assert_readable(fig)


def _fixes_frame(offsets: dict[str, float], unstable_mx: int = 0) -> tuple[pd.DataFrame, pd.DataFrame]:
    """lm_spikes_fixes' shape: bf16, full MXFP8 E4M3 and the two fixes at lr 0.01 on seeds 101–108,
    each label ``offsets[label]`` above bf16 (± 0.002 by seed, alternating), the first ``unstable_mx``
    full-MX runs unstable and 0.5 higher; and their curves (loss falling, grad norm 0.5, 5 for full MX)."""
    e4m3 = ("fp8_e4m3", "fp8_e4m3", False)
    labels = {"bf16": ("bf16", "bf16", False), "mxfp8_e4m3": e4m3, "e4m3w-bf16a": ("fp8_e4m3", "bf16", False),
              "e4m3-fwd": ("fp8_e4m3", "fp8_e4m3", True)}  # fmt: skip
    rows, cur = [], []
    for label, (w, a, fwd) in labels.items():
        for k, s in enumerate(range(101, 109)):
            bad = label == "mxfp8_e4m3" and k < unstable_mx
            wobble = 0.002 * (-1) ** k if label != "bf16" else 0.0  # each Δ: offset ± 0.002 by seed
            L = 1.66 + 0.01 * k + offsets.get(label, 0.0) + wobble + (0.5 if bad else 0.0)
            run = f"{label}_s{s}"
            rows.append({
                "run": run, "sweep.precision": label, "precision": f"{w}/{a}", "w": w, "a": a,
                "fwd_only": fwd, "train.seed": s, "train.lr": 0.01, "model.depth": 2, "model.d_model": 48,
                "N": 80304, "budget": 2e12, "steps": 2026, "tokens_per_param": 51.7, "status": "done",
                "unstable": bad, "spiked": bad, "diverged": False, "final_val_loss": L, "min_val_loss": L,
            })  # fmt: skip
            for step in range(10, 2030, 10):
                norm = 5.0 if label == "mxfp8_e4m3" and step > 400 else 0.5
                cur.append({"run": run, "step": step, "loss": L + 3.0 / step**0.5, "grad_norm": norm})
    return pd.DataFrame(rows), pd.DataFrame(cur)


def test_fixes_claim_tests_the_fixes_where_full_mx_falls_behind(tmp_path):
    from analysis.results.common import NOT, PARTIAL, REPRODUCED, Source, _Doc
    from analysis.results.lm import lm_claims

    lm = Source("lm_precisions", "python launch.py -m experiment=lm_precisions", tmp_path / "lm")
    lm.df = exact_frame().assign(**{"train.lr": 3e-3})

    def claim(offsets, unstable_mx=0):
        src = Source("lm_spikes_fixes", "python launch.py -m experiment=lm_spikes_fixes", tmp_path / "fixes")
        src.df, src.cur = _fixes_frame(offsets, unstable_mx)
        doc = _Doc(tmp_path / "docs" / "results.md")
        lm_claims(doc, lm, src)
        return "\n".join(doc.lines)

    text = claim({"mxfp8_e4m3": 0.2, "e4m3-fwd": 0.005}, unstable_mx=2)
    assert f"**{REPRODUCED.capitalize()}.**" in text and "pre-registered in `lm_spikes_fixes`" in text
    rows = {r[0][2:]: r for r in (line.split(" | ") for line in text.splitlines() if line.startswith("| P"))}
    assert list(rows) == ["P1", "P2", "P3", "P4", "P5"]
    # the two unstable full-MX runs count (0.5 higher): 8 pairs, Δ = 0.2 + 2·0.5/8
    assert rows["P1"][1:4] == ["mxfp8_e4m3 > bf16", "8", "+0.3250"]
    assert rows["P4"][1] == "e4m3w-bf16a ≡ bf16 (±0.02)" and rows["P5"][3] == "+0.0050"
    assert all(r[-1] == "yes |" for r in rows.values())
    own = text.split("Each precision")[1].split("The first look")[0]
    table = [line.split(" | ") for line in own.splitlines() if line.startswith("| ")][1:]  # no header
    assert [r[1] for r in table] == ["bf16", "mxfp8_e4m3", "e4m3w-bf16a", "e4m3-fwd"]  # after the LR
    assert table[1][3] == "2"  # full MX's unstable runs, counted
    assert "at lr 0.01; seeds 101–108." in text
    assert (tmp_path / "docs" / "figures" / "lm_spikes_fixes_curves.png").exists()
    # the first look at lm_precisions follows, without a verdict of its own
    assert "The first look, at one LR (0.003): `python launch.py -m experiment=lm_precisions`" in text
    assert text.count("**") == 2
    assert f"**{PARTIAL.capitalize()}.**" in claim({"mxfp8_e4m3": 0.2, "e4m3-fwd": 0.1})  # P5 fails
    assert f"**{NOT.capitalize()}.**" in claim({"mxfp8_e4m3": 0.2, "e4m3w-bf16a": 0.2, "e4m3-fwd": 0.2})
    # without the test, lm_precisions' own rule decides
    doc = _Doc(tmp_path / "docs" / "results.md")
    lm_claims(doc, lm)
    assert "**Not run here.**" in "\n".join(doc.lines) and "The first look" not in "\n".join(doc.lines)


def test_training_curves_plot_shows_each_precision_with_its_seed_band():
    df, cur = _fixes_frame({"mxfp8_e4m3": 0.2})
    cur = cur.merge(lmstudy.label_column(df)[["run", "label", "train.seed"]], on="run")
    fig = plots.training_curves_plot(
        cur.rename(columns={"train.seed": "seed"}), "Train loss and gradient norm"
    )
    loss_ax, norm_ax = fig.axes
    names = [t.get_text() for t in fig.legends[0].get_texts()]
    assert names == ["bf16", "mxfp8_e4m3", "e4m3w-bf16a", "e4m3-fwd"]
    assert len(loss_ax.lines) == 4 and len(loss_ax.collections) == 4  # a line and a band each
    # the first steps' loss (up to +0.95) is off-scale; the rest of every curve is on it
    assert 1.9 < loss_ax.get_ylim()[1] < 2.3
    assert max(max(line.get_ydata()) for line in norm_ax.lines) == pytest.approx(5.0)
    assert_readable(fig)


def test_training_curves_plot_wraps_a_legend_too_wide_for_one_row():
    """3.21's six names (up to 24 characters) do not fit side by side under the 10-inch figure: the
    legend takes two rows instead of running past both edges (where savefig cuts it), and keeps the
    tables' order; five short names still sit in one row."""
    names = [f"{g}_ceil{w}" for w in ("", "_hphead", "_headonly") for g in ("mxfp8_e4m3", "e4m3_e5m2g")]
    cur = pd.DataFrame(
        [
            {"label": n, "seed": s, "step": t, "loss": 2.0 + 0.01 * i + 1 / t, "grad_norm": 0.5}
            for i, n in enumerate(names)
            for s in (0, 1)
            for t in (10, 500, 1000)
        ]  # fmt: skip
    )
    fig = plots.training_curves_plot(cur, "Train loss and gradient norm at lr 0.1")
    (legend,) = fig.legends
    assert [t.get_text() for t in legend.get_texts()] == names and legend._ncols == 3
    assert_readable(fig)
    short = plots.training_curves_plot(
        cur[cur["label"].isin(names[:5])].replace(
            dict(zip(names, ["bf16", "e4m3", "e5m2", "e4m3_ceil", "e5m2_ceil", "x"], strict=True))
        ),
        "short",
    )
    assert short.legends[0]._ncols == 5


def _ceil_frame(offsets: dict[str, float], unstable: dict[str, int]) -> tuple[pd.DataFrame, pd.DataFrame]:
    """lm_spikes_ceil's shape: bf16 and MXFP8 E4M3 and E5M2 under floor and ceil at lr 0.01 and 0.1 on
    seeds 115–120. At lr 0.01 each label ends ``offsets[label]`` above bf16 (± 0.001 × its index by
    seed, alternating); at lr 0.1 the first ``unstable[label]`` seeds blew up (loss 2 higher). Curves: the
    loss falling, the grad norm 0.5."""
    fmts = {"bf16": "bf16", "mxfp8_e4m3": "fp8_e4m3", "mxfp8_e4m3_ceil": "fp8_e4m3",
            "mxfp8_e5m2": "fp8_e5m2", "mxfp8_e5m2_ceil": "fp8_e5m2"}  # fmt: skip
    rows, cur = [], []
    for i, (label, w) in enumerate(fmts.items()):
        for lr in (0.01, 0.1):
            for k, s in enumerate(range(115, 121)):
                bad = lr == 0.1 and k < unstable.get(label, 0)
                wobble = 0.001 * i * (-1) ** k  # no two labels' Δ constant over the seeds
                off = offsets.get(label, 0.0) if lr == 0.01 else 0.0
                L = 1.66 + 0.01 * k + (0.05 if lr == 0.1 else 0.0) + off + wobble + (2.0 if bad else 0.0)
                run = f"{label}_lr{lr}_s{s}"
                rows.append({
                    "run": run, "sweep.precision": label, "precision": f"{w}/{w}", "w": w, "a": w,
                    "fwd_only": False, "scale_rule": "ceil" if label.endswith("_ceil") else "floor",
                    "train.seed": s, "train.lr": lr, "model.depth": 2, "model.d_model": 48, "N": 80304,
                    "budget": 2e12, "steps": 2026, "tokens_per_param": 51.7, "status": "done",
                    "unstable": bad, "spiked": bad, "diverged": False, "final_val_loss": L, "min_val_loss": L,
                })  # fmt: skip
                cur += [
                    {"run": run, "step": t, "loss": L + 3.0 / t**0.5, "grad_norm": 0.5}
                    for t in (10, 1000, 2020)
                ]
    return pd.DataFrame(rows), pd.DataFrame(cur)


def test_ceil_claim_tests_stability_at_the_high_lr_and_the_gap_at_bf16s_best(tmp_path):
    from analysis.results.common import NOT, NOT_RUN, PARTIAL, REPRODUCED, Source, _Doc
    from analysis.results.lm import CEIL, follow_up_claim

    def claim(offsets, unstable, ran=True):
        src = Source("lm_spikes_ceil", "python launch.py -m experiment=lm_spikes_ceil", tmp_path / "ceil")
        if ran:
            src.df, src.cur = _ceil_frame(offsets, unstable)
        doc = _Doc(tmp_path / "docs" / "results.md")
        follow_up_claim(doc, CEIL, src)
        return "\n".join(doc.lines)

    def rows(text, first="| C"):
        return {
            r[0][2:]: r for r in (line.split(" | ") for line in text.splitlines() if line.startswith(first))
        }

    gap = {"mxfp8_e4m3": 0.2, "mxfp8_e5m2": 0.3, "mxfp8_e4m3_ceil": 0.005, "mxfp8_e5m2_ceil": 0.05}
    text = claim(gap, {"mxfp8_e4m3": 6, "mxfp8_e5m2": 6})
    assert f"**{REPRODUCED.capitalize()}.**" in text and "pre-registered in `lm_spikes_ceil`" in text
    assert "C1, C2, C3, C4 and C5 all hold" in text
    # the rule says how each kind of prediction is tested, from the tests themselves
    assert "C1 and C2 at lr 0.1: the first precision unstable" in text and "McNemar, α = 0.05)" in text
    assert "C3, C4 and C5 at lr 0.01: final val loss" in text and "(TOST) at ±0.02. M1 is measured" in text
    c = rows(text)
    assert list(c) == ["C1", "C2", "C3", "C4", "C5"]
    # C1, C2 pair lr 0.1's runs alone (6 seeds): floor alone unstable in 6, ceil in 0
    assert (c["C1"][1], c["C1"][2], c["C1"][3], c["C1"][5], c["C1"][6]) == (
        "mxfp8_e5m2", "mxfp8_e5m2_ceil", "6", "6", "0"
    )  # fmt: skip
    assert c["C2"][1] == "mxfp8_e4m3" and c["C2"][-1] == "yes |"
    # C3–C5 on lr 0.01's runs alone: 6 pairs each, lr 0.1's blow-ups do not enter the Δ
    assert c["C3"][1:4] == ["mxfp8_e4m3 > mxfp8_e4m3_ceil", "6", "+0.1950"]
    assert c["C5"][1:4] == ["mxfp8_e4m3_ceil ≡ bf16 (±0.02)", "6", "+0.0050"]
    assert all(r[-1] == "yes |" for r in c.values())
    # the measured row: its Δ and a two-sided p, nothing to hold
    (m,) = rows(text, "| M1").values()
    assert m[1:4] == ["mxfp8_e5m2_ceil − bf16 (measured)", "6", "+0.0500"] and m[-1] == "– |"
    assert "at lr 0.01, 0.1; seeds 115–120." in text
    for name in ("lm_spikes_ceil_lr0.1.png", "lm_spikes_ceil_lr0.01.png"):
        assert (tmp_path / "docs" / "figures" / name).exists()
    # ceil does not rescue E5M2 at lr 0.1 (C1 fails), nor close E4M3's gap (C5 fails): partially
    partly = claim({**gap, "mxfp8_e4m3_ceil": 0.1}, {"mxfp8_e4m3": 6, "mxfp8_e5m2": 6, "mxfp8_e5m2_ceil": 6})
    assert f"**{PARTIAL.capitalize()}.**" in partly
    held = {name: r[-1] for name, r in rows(partly).items()}
    assert held == {"C1": "no |", "C2": "yes |", "C3": "yes |", "C4": "yes |", "C5": "no |"}
    same = {"mxfp8_e4m3": 0.2, "mxfp8_e5m2": 0.3, "mxfp8_e4m3_ceil": 0.2, "mxfp8_e5m2_ceil": 0.3}
    assert f"**{NOT.capitalize()}.**" in claim(same, {})
    assert f"**{NOT_RUN.capitalize()}.**" in claim(gap, {}, ran=False)


def test_fwd_ceil_claim_tests_forward_only_mx_under_both_rules_at_one_lr(tmp_path):
    from analysis.results.common import PARTIAL, REPRODUCED, Source, _Doc
    from analysis.results.lm import FWD_CEIL, follow_up_claim

    def claim(offsets):
        frame, cur = _fixes_frame(offsets)  # bf16, full MX and the two fixes at lr 0.01, seeds 101–108
        names = {"e4m3w-bf16a": "e4m3-fwd-ceil", "mxfp8_e4m3": "mxfp8_e4m3_ceil"}  # the same shapes
        frame["sweep.precision"] = frame["sweep.precision"].replace(names)
        jitter = 0.001 * (frame["train.seed"] % 3 - 1)  # sums to 0 over seeds 101–108
        frame.loc[frame["sweep.precision"].eq("e4m3-fwd-ceil"), "final_val_loss"] += jitter  # no constant Δ
        src = Source(
            "lm_spikes_fwd_ceil", "python launch.py -m experiment=lm_spikes_fwd_ceil", tmp_path / "f"
        )
        src.df, src.cur = frame, cur
        doc = _Doc(tmp_path / "docs" / "results.md")
        follow_up_claim(doc, FWD_CEIL, src)
        return "\n".join(doc.lines)

    text = claim({"e4m3-fwd": 0.015, "e4m3w-bf16a": 0.004, "mxfp8_e4m3": 0.01})
    assert f"**{REPRODUCED.capitalize()}.**" in text and "Reproduced when F1 and F2 both hold" in text
    assert "F1 and F2 at lr 0.01: final val loss" in text and "McNemar" not in text  # no stability test
    assert "M1 and M2 are measured, not part of the rule." in text
    r = {
        x[0][2:]: x
        for x in (line.split(" | ") for line in text.splitlines() if line.startswith(("| F", "| M")))
    }
    assert list(r) == ["F1", "F2", "M1", "M2"]
    assert r["F1"][1] == "e4m3-fwd > e4m3-fwd-ceil" and r["F1"][3] == "+0.0110"
    assert r["F2"][1] == "e4m3-fwd-ceil ≡ bf16 (±0.02)" and r["M2"][3] == "+0.0100" and r["M2"][-1] == "– |"
    assert "unstable runs paired" not in text  # no stability predictions: no paired table
    assert (tmp_path / "docs" / "figures" / "lm_spikes_fwd_ceil_lr0.01.png").exists()
    # the clamp is not the residual: F1 fails, F2 holds
    assert f"**{PARTIAL.capitalize()}.**" in claim({"e4m3-fwd": 0.004, "e4m3w-bf16a": 0.004})


_ROLES = {"bf16": ("bf16", "bf16"), "mxfp8_e4m3_ceil": ("fp8_e4m3", None),
          "mxfp8_e5m2_ceil": ("fp8_e5m2", None), "e4m3_e5m2g_ceil": ("fp8_e4m3", "fp8_e5m2"),
          "e5m2_e4m3g_ceil": ("fp8_e5m2", "fp8_e4m3")}  # fmt: skip


def _roles_frame(
    offsets: dict[str, float], unstable: dict[str, int], fmts=_ROLES, seeds=range(129, 137), lr=0.1
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """A follow-up at ``lr`` in lm_spikes' shape (lm_spikes_e5m2_roles': ``fmts`` label → (weights'
    format, the incoming gradient's), its seeds): ``offsets[label]`` above the first label (with a
    per-label, per-seed wobble), the first ``unstable[label]`` seeds marked unstable."""
    rows, cur = [], []
    for i, (label, (w, g)) in enumerate(fmts.items()):
        for k, s in enumerate(seeds):
            bad = k < unstable.get(label, 0)
            L = 1.75 + 0.01 * k + offsets.get(label, 0.0) + 0.001 * i * (-1) ** k
            run = f"{label}_lr{lr:g}_s{s}"
            rows.append({
                "run": run, "sweep.precision": label, "precision": f"{w}/{w}", "w": w, "a": w,
                "g_dgrad": g, "fwd_only": False, "scale_rule": "ceil", "train.seed": s, "train.lr": lr,
                "model.depth": 2, "model.d_model": 48, "N": 80304, "budget": 2e12, "steps": 2026,
                "tokens_per_param": 51.7, "status": "done", "unstable": bad, "spiked": bad, "diverged": False,
                "final_val_loss": L, "min_val_loss": L - (0.1 if bad else 0.0),
            })  # fmt: skip
            cur += [
                {"run": run, "step": t, "loss": L + 3.0 / t**0.5, "grad_norm": 0.5} for t in (10, 1000, 2020)
            ]
    return pd.DataFrame(rows), pd.DataFrame(cur)


def test_e5m2_roles_claim_tests_the_operand_and_gradient_swaps_at_lr_0_1(tmp_path):
    from analysis.results.common import NOT, PARTIAL, REPRODUCED, Source, _Doc
    from analysis.results.lm import E5M2_ROLES, follow_up_claim

    def claim(offsets, unstable=None):
        src = Source(
            "lm_spikes_e5m2_roles", "python launch.py -m experiment=lm_spikes_e5m2_roles", tmp_path / "r"
        )
        src.df, src.cur = _roles_frame(offsets, unstable or {})
        doc = _Doc(tmp_path / "docs" / "results.md")
        follow_up_claim(doc, E5M2_ROLES, src)
        return "\n".join(doc.lines)

    def rows(text):
        lines = (line.split(" | ") for line in text.splitlines() if line.startswith(("| E", "| M")))
        return {r[0][2:]: r for r in lines}

    def above_bf16(e4m3, e5m2, e4m3_e5m2g, e5m2_e4m3g):
        names = ("mxfp8_e4m3_ceil", "mxfp8_e5m2_ceil", "e4m3_e5m2g_ceil", "e5m2_e4m3g_ceil")
        return dict(zip(names, (e4m3, e5m2, e4m3_e5m2g, e5m2_e4m3g), strict=True))

    forward = above_bf16(0.015, 0.3, 0.02, 0.25)
    text = claim(forward, {"mxfp8_e5m2_ceil": 2})
    assert f"**{REPRODUCED.capitalize()}.**" in text and "E1, E2 and E3 all hold" in text
    r = rows(text)
    assert list(r) == ["E1", "E2", "E3", "M1", "M2"]
    assert r["E1"][1:4] == ["mxfp8_e5m2_ceil > mxfp8_e4m3_ceil", "8", "+0.2850"]
    assert r["E2"][1:4] == ["e5m2_e4m3g_ceil > e4m3_e5m2g_ceil", "8", "+0.2300"]
    assert r["E3"][1] == "e4m3_e5m2g_ceil ≡ mxfp8_e4m3_ceil (±0.02)" and r["E3"][-1] == "yes |"
    assert r["M1"][1:4] == ["e5m2_e4m3g_ceil − mxfp8_e5m2_ceil (measured)", "8", "-0.0500"]
    assert r["M2"][1:4] == ["mxfp8_e5m2_ceil − bf16 (measured)", "8", "+0.3000"] and r["M2"][-1] == "– |"
    assert "unstable runs paired" not in text  # nothing predicted of stability
    outcome = {
        x[1]: x for x in (line.split(" | ") for line in text.splitlines() if line.startswith("| 0.1 |"))
    }
    assert outcome["mxfp8_e5m2_ceil"][3] == "2" and outcome["e4m3_e5m2g_ceil"][3] == "0"
    assert "at lr 0.1; seeds 129–136." in text
    assert (tmp_path / "docs" / "figures" / "lm_spikes_e5m2_roles_lr0.1.png").exists()
    # the gradients carry the cost instead: E2 and E3 fail, E1 holds
    grads = above_bf16(0.015, 0.3, 0.25, 0.02)
    text = claim(grads)
    assert f"**{PARTIAL.capitalize()}.**" in text
    assert {k: v[-1] for k, v in rows(text).items() if k[0] == "E"} == {
        "E1": "yes |",
        "E2": "no |",
        "E3": "no |",
    }
    # nothing as predicted: E4M3 the worse format, the E5M2-gradient swap far from it
    assert f"**{NOT.capitalize()}.**" in claim(above_bf16(0.3, 0.015, 0.4, 0.02))


def test_e5m2_head_claim_tests_the_head_in_fp32_and_the_head_alone(tmp_path):
    from analysis.results.common import NOT, PARTIAL, REPRODUCED, Source, _Doc
    from analysis.results.lm import E5M2_HEAD, follow_up_claim

    e4, e5 = ("fp8_e4m3", None), ("fp8_e4m3", "fp8_e5m2")
    fmts = {f"{g}_ceil{where}": f for where in ("", "_hphead", "_headonly")
            for g, f in (("mxfp8_e4m3", e4), ("e4m3_e5m2g", e5))}  # fmt: skip

    def claim(every, hphead, headonly, e4m3_hphead=0.0, e4m3_headonly=0.0):
        offsets = {
            "e4m3_e5m2g_ceil": every,
            "mxfp8_e4m3_ceil_hphead": e4m3_hphead,
            "e4m3_e5m2g_ceil_hphead": e4m3_hphead + hphead,
            "mxfp8_e4m3_ceil_headonly": e4m3_headonly,
            "e4m3_e5m2g_ceil_headonly": e4m3_headonly + headonly,
        }
        src = Source(
            "lm_spikes_e5m2_head", "python launch.py -m experiment=lm_spikes_e5m2_head", tmp_path / "h"
        )
        src.df, src.cur = _roles_frame(offsets, {"e4m3_e5m2g_ceil": 6}, fmts, range(145, 151))
        doc = _Doc(tmp_path / "docs" / "results.md")
        follow_up_claim(doc, E5M2_HEAD, src)
        text = "\n".join(doc.lines)
        lines = (line.split(" | ") for line in text.splitlines() if line.startswith(("| H", "| M")))
        return text, {r[0][2:]: r for r in lines}

    # the head's: E5M2 gradients cost nothing without it and something with it alone
    text, r = claim(0.45, 0.0, 0.3, e4m3_hphead=0.01)
    assert f"**{REPRODUCED.capitalize()}.**" in text and "H1, H2 and H3 all hold" in text
    assert list(r) == ["H1", "H2", "H3", "M1", "M2"]
    assert r["H1"][1:4] == ["e4m3_e5m2g_ceil > mxfp8_e4m3_ceil", "6", "+0.4500"]
    assert r["H2"][1] == "e4m3_e5m2g_ceil_hphead ≡ mxfp8_e4m3_ceil_hphead (±0.02)" and r["H2"][-1] == "yes |"
    assert r["H3"][1:4] == ["e4m3_e5m2g_ceil_headonly > mxfp8_e4m3_ceil_headonly", "6", "+0.3000"]
    assert r["M1"][1:4] == ["e4m3_e5m2g_ceil − e4m3_e5m2g_ceil_hphead (measured)", "6", "+0.4400"]
    assert r["M2"][1:4] == ["mxfp8_e4m3_ceil_hphead − mxfp8_e4m3_ceil (measured)", "6", "+0.0100"]
    assert "H1, H2 and H3 at lr 0.1: final val loss" in text and "(TOST) at ±0.02" in text
    assert "| Δ vs mxfp8_e4m3_ceil (mean ± sd over seeds) |" in text and "seeds 145–150." in text
    outcome = {x[1]: x for x in (ln.split(" | ") for ln in text.splitlines() if ln.startswith("| 0.1 |"))}
    assert outcome["e4m3_e5m2g_ceil"][3] == "6" and outcome["e4m3_e5m2g_ceil_hphead"][3] == "0"
    assert (tmp_path / "docs" / "figures" / "lm_spikes_e5m2_head_lr0.1.png").exists()
    # the blocks': the cost stays with the head in fp32 and is not there with the head alone
    text, r = claim(0.45, 0.4, 0.0)
    assert f"**{PARTIAL.capitalize()}.**" in text
    assert {k: v[-1] for k, v in r.items() if k[0] == "H"} == {"H1": "yes |", "H2": "no |", "H3": "no |"}
    # no cost anywhere: H2 alone holds; and none at all where it is everywhere but H1 is reversed
    assert f"**{PARTIAL.capitalize()}.**" in claim(0.0, 0.0, 0.0)[0]
    assert f"**{NOT.capitalize()}.**" in claim(-0.1, 0.3, -0.1)[0]


def test_e5m2_lr_claim_tests_each_prediction_at_its_own_lr(tmp_path):
    from analysis.results.common import NOT, PARTIAL, REPRODUCED, Source, _Doc
    from analysis.results.lm import E5M2_LR, follow_up_claim

    e5 = ("fp8_e4m3", "fp8_e5m2")
    fmts = {"mxfp8_e4m3_ceil": ("fp8_e4m3", None), "e4m3_e5m2g_ceil": e5, "e4m3_e5m2g_sr_ceil": e5}

    def claim(at_001, at_003):
        frames = [
            _roles_frame(dict(zip(fmts, (0.0, *offsets), strict=False)), {}, fmts, range(151, 157), lr)
            for lr, offsets in ((0.01, at_001), (0.03, at_003))
        ]
        src = Source("lm_spikes_e5m2_lr", "python launch.py -m experiment=lm_spikes_e5m2_lr", tmp_path / "l")
        src.df, src.cur = (pd.concat(f, ignore_index=True) for f in zip(*frames, strict=True))
        doc = _Doc(tmp_path / "docs" / "results.md")
        follow_up_claim(doc, E5M2_LR, src)
        text = "\n".join(doc.lines)
        lines = (line.split(" | ") for line in text.splitlines() if line.startswith(("| L", "| M")))
        return text, {r[0][2:]: r for r in lines}

    text, r = claim((0.05, 0.01), (0.2, 0.02))
    assert f"**{REPRODUCED.capitalize()}.**" in text and "L1, L2, L3 and L4 all hold" in text
    assert list(r) == ["L1", "L2", "M1", "L3", "L4", "M2"]
    # each test reads the runs of its own LR
    assert r["L1"][1:4] == ["e4m3_e5m2g_ceil > mxfp8_e4m3_ceil", "6", "+0.0500"]
    assert r["L2"][3] == "+0.0400" and r["M1"][3] == "+0.0100"
    assert r["L3"][1:4] == ["e4m3_e5m2g_ceil > mxfp8_e4m3_ceil", "6", "+0.2000"]
    assert r["L4"][3] == "+0.1800" and r["M2"][3] == "+0.0200"
    assert "At lr 0.01, final val loss on runs matched by seed (L1, L2 and M1):" in text
    assert "At lr 0.03, final val loss on runs matched by seed (L3, L4 and M2):" in text
    assert "L1 and L2 at lr 0.01, L3 and L4 at lr 0.03: final val loss of every finished run" in text
    assert "at lr 0.01, 0.03; seeds 151–156." in text
    for lr in ("0.01", "0.03"):
        assert (tmp_path / "docs" / "figures" / f"lm_spikes_e5m2_lr_lr{lr}.png").exists()
    # a high-LR cost only: nothing at lr 0.01, a cost at 0.03
    text, r = claim((0.0, 0.0), (0.2, 0.02))
    assert f"**{PARTIAL.capitalize()}.**" in text
    assert {k: v[-1] for k, v in r.items() if k[0] == "L"} == {
        "L1": "no |", "L2": "no |", "L3": "yes |", "L4": "yes |"
    }  # fmt: skip
    assert f"**{NOT.capitalize()}.**" in claim((0.0, 0.0), (0.0, 0.0))[0]


def test_e5m2_gamma_claim_is_one_equivalence_with_the_unstable_runs_counted(tmp_path):
    from analysis.results.common import NOT, REPRODUCED, Source, _Doc
    from analysis.results.lm import E5M2_GAMMA, follow_up_claim

    fmts = {"mxfp8_e4m3_ceil": ("fp8_e4m3", None), "e4m3_e5m2g_ceil": ("fp8_e4m3", "fp8_e5m2")}

    def claim(cost, unstable=0):
        src = Source(
            "lm_spikes_e5m2_gamma", "python launch.py -m experiment=lm_spikes_e5m2_gamma", tmp_path / "s"
        )
        src.df, src.cur = _roles_frame({"e4m3_e5m2g_ceil": cost}, {"e4m3_e5m2g_ceil": unstable}, fmts,
                                       range(157, 165))  # fmt: skip
        doc = _Doc(tmp_path / "docs" / "results.md")
        follow_up_claim(doc, E5M2_GAMMA, src)
        return "\n".join(doc.lines)

    text = claim(0.004)
    assert f"**{REPRODUCED.capitalize()}.**" in text
    assert "Reproduced when S1 holds; not when it does not." in text and "partially" not in text
    assert "| S1 | e4m3_e5m2g_ceil ≡ mxfp8_e4m3_ceil (±0.02) | 8 | +0.0040 |" in text
    text = claim(0.3, unstable=5)
    assert f"**{NOT.capitalize()}.**" in text
    outcome = {x[1]: x for x in (ln.split(" | ") for ln in text.splitlines() if ln.startswith("| 0.1 |"))}
    assert outcome["e4m3_e5m2g_ceil"][3] == "5" and outcome["mxfp8_e4m3_ceil"][3] == "0"


def test_e5m2_grads_claim_tests_each_gradient_gemm_and_stochastic_rounding(tmp_path, monkeypatch):
    from analysis import plots
    from analysis.results.common import PARTIAL, REPRODUCED, Source, _Doc
    from analysis.results.lm import E5M2_GRADS, follow_up_claim

    drawn = []
    plot = plots.training_curves_plot
    monkeypatch.setattr(plots, "training_curves_plot", lambda c, t: drawn.append(c) or plot(c, t))

    names = ("e4m3_e5m2g_ceil", "e4m3_e5m2dgrad_ceil", "e4m3_e5m2wgrad_ceil", "e4m3_e5m2g_sr_ceil")
    fmts = {"mxfp8_e4m3_ceil": ("fp8_e4m3", None), **dict.fromkeys(names, ("fp8_e4m3", "fp8_e5m2"))}

    def claim(both, dgrad, wgrad, sr):
        offsets = dict(zip(names, (both, dgrad, wgrad, sr), strict=True))
        src = Source(
            "lm_spikes_e5m2_grads", "python launch.py -m experiment=lm_spikes_e5m2_grads", tmp_path / "g"
        )
        src.df, src.cur = _roles_frame(offsets, {}, fmts, range(137, 145))
        doc = _Doc(tmp_path / "docs" / "results.md")
        follow_up_claim(doc, E5M2_GRADS, src)
        text = "\n".join(doc.lines)
        lines = (line.split(" | ") for line in text.splitlines() if line.startswith(("| G", "| M")))
        return text, {r[0][2:]: r for r in lines}

    text, r = claim(0.45, 0.2, 0.3, 0.05)
    assert f"**{REPRODUCED.capitalize()}.**" in text and "G1, G2, G3 and G4 all hold" in text
    assert list(r) == ["G1", "G2", "G3", "G4", "M1", "M2"]
    assert r["G2"][1:4] == ["e4m3_e5m2wgrad_ceil > mxfp8_e4m3_ceil", "8", "+0.3000"]
    assert r["G3"][1:4] == ["e4m3_e5m2dgrad_ceil > mxfp8_e4m3_ceil", "8", "+0.2000"]
    assert r["G4"][1:4] == ["e4m3_e5m2g_ceil > e4m3_e5m2g_sr_ceil", "8", "+0.4000"]
    assert r["M2"][1:4] == ["e4m3_e5m2wgrad_ceil − e4m3_e5m2dgrad_ceil (measured)", "8", "+0.1000"]
    assert "at lr 0.1; seeds 137–144." in text
    # no bf16 in this sweep: each precision's Δ is read against full E4M3 under ceil
    assert "| Δ vs mxfp8_e4m3_ceil (mean ± sd over seeds) |" in text
    # and the figure draws it first, as the table lists it
    assert drawn[-1]["label"].iloc[0] == "mxfp8_e4m3_ceil"
    assert (tmp_path / "docs" / "figures" / "lm_spikes_e5m2_grads_lr0.1.png").exists()
    # wgrad alone carries it and stochastic rounding does not help: G3 and G4 fail
    text, r = claim(0.45, 0.0, 0.4, 0.45)
    assert f"**{PARTIAL.capitalize()}.**" in text
    assert {k: v[-1] for k, v in r.items() if k[0] == "G"} == {
        "G1": "yes |", "G2": "yes |", "G3": "no |", "G4": "no |"
    }  # fmt: skip
