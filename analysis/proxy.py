"""The instability study's proxy, read from run records: verdicts against the fp32 twin, the mechanism
before each blow-up, and the outcome of every intervention branch. Pure functions of the frames of
``analysis.collect`` (``collect`` and ``curves``); nothing here trains or imports training code.

Vocabulary (the claims of docs/results.md are stated in these terms):

* **reference** of a run: its fp32 twin's final val loss (``twin_final_val_loss``; same init, same
  batches, trained alongside). A branch trains without a twin (``sweep.branch_twin=false``): its
  reference is its parent's twin, which is the same fp32 trajectory.
* **blew up**: the run diverged (non-finite loss) or ended at ≥ ``BLOWUP`` × its reference's loss.
* **twin worse** (the rule's mirror): the reference ended at ≥ ``BLOWUP`` × the run's loss. Where MX
  and fp32 end at one loss up to noise of either sign (a high LR at which fp32 itself trains badly),
  the rule fires both ways about equally often; only a blow-up count well above the mirror's says MX.
* **stable**: not blown up and no spike left unrecovered (``spike_step`` set and ``recovered`` false).
  A twin is stable when it did not diverge and every spike it had recovered.
* **onset** of a blow-up: the first logged step whose train loss exceeds ``ONSET`` × the lowest loss
  logged before it (the spike detector's moving average lags the jump by up to its window); the
  detector's ``spike_step`` or the divergence step when no logged loss jumps that far.
* **mechanism before the onset**: the LayerNorm-γ clip fraction (``clip_ln/*``, computed with the
  format γ is quantized in; mean and max over the LayerNorms) and the gradient cosine to the twin
  (``twin_cos``), each as the median over the ``WINDOW`` logged steps before the onset, against the
  cosine's median over the first ``WINDOW`` steps of the run. Where ``python -m train.probe`` has read
  the run's checkpoints (``probe.jsonl``), also the same-weights cosine ``probe_cos`` = cos(g_mx, g_fp32)
  at the run's own weights: at its first checkpoint, at the last checkpoint before the onset, and for
  the same seed's run with γ unquantized at that same checkpoint (the control).
* **Adam's state** (``adam_state``; records that log ``train.optim.adam_stats``): the normalized step
  ``adam_upd/matrix`` = RMS(m̂/(√v̂+ε)) of the Linear weights and the gradient against the second-moment
  memory ``adam_gv/*`` = Σg²/Σv̂ (``adam_gv_max`` the largest per tensor), the run's and its twin's, as
  medians over the ``ADAM_WINDOW`` steps before the onset (for a run that did not blow up: before
  the median onset of those that did, the same steps of training), the step at which ``adam_gv_max``
  first exceeds 1 relative to the onset (the *lead*: negative means before the loss jumped), its peak
  within ``WINDOW`` steps of the onset, and ``adam_gv/*`` at the step each branch left the run.
* **step source** (``step_source``): the same seeds trained from init in several precisions; each run's
  normalized step over the fixed ``STEP_WINDOW`` of logged steps (before its own onset), against its
  twin's and against one reference precision of the same seed (``paired_steps``). Per coordinate
  m̂/√v̂ ≈ (m̂/√g²)·√(g²/v̂): how consistent the gradient's sign is over β1's memory, times how large the
  present gradient is against v̂'s memory of it. For a gradient that keeps its sign and size the step
  is 1; for zero-mean noise of steady size it is √((1−β1)/(1+β1)) ≈ 0.23; a gradient that shrinks
  while v̂ remembers it larger scales both down. ``gv`` (Σg²/Σv̂ of the Linear weights over the same
  steps) is the second factor, and ``consistency`` = ``upd``/√``gv`` the first: a larger consistency at
  the same steps of training means a gradient component that does not average out, i.e. a bias.
"""

from __future__ import annotations

import json
import math
from typing import Any

import numpy as np
import pandas as pd

from analysis.collect import run_rows
from analysis.instability import FINISHED
from records import PROBE

BLOWUP = 2.0
ONSET = 3.0
WINDOW = 100
ADAM_WINDOW = 50
"""Steps before the onset over which ``adam_state`` takes its medians (the window its preset's
predictions were stated for: proxy_mechanism_d128_adam_state)."""


def _get(row: pd.Series, key: str) -> Any:
    v = row.get(key)
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return None
    return v


def _col(df: pd.DataFrame, key: str, numeric: bool = True) -> pd.Series:
    """Column ``key`` (numbers coerced), or all-missing when no record has it."""
    if key not in df:
        return pd.Series(np.nan if numeric else None, index=df.index, dtype=float if numeric else object)
    return pd.to_numeric(df[key], errors="coerce") if numeric else df[key]


def variant(label: str) -> str:
    """A branch's name from its sweep label (``"mx_ln_e4m3→no_mx@200"`` → ``"no_mx"``); else the label."""
    return label.split("→", 1)[1].rsplit("@", 1)[0] if "→" in label else label


def parent_label(label: str) -> str:
    """A branch's parent's label from its sweep label (``"mx_ln_e4m3→no_mx@200"`` → ``"mx_ln_e4m3"``)."""
    return label.split("→", 1)[0]


def proxy_runs(df: pd.DataFrame) -> pd.DataFrame:
    """The proxy runs of a ``collect`` frame with the study's columns: ``label`` (the sweep's name of
    the precision), ``variant``, ``seed``, ``parent`` (the parent's ``run`` for a branch, else None),
    ``branch_step``, ``reference`` (fp32 val loss), ``ratio`` (final val loss / reference),
    ``blew_up``, ``stable``, ``twin_stable``."""
    if df.empty or "task" not in df or not df["task"].eq("proxy").any():
        return pd.DataFrame()
    runs = df[df["task"].eq("proxy")].copy()
    names = {str(p).rstrip("/").rsplit("/", 1)[-1]: r for p, r in zip(runs["path"], runs["run"], strict=True)}
    label = runs["sweep.precision"] if "sweep.precision" in runs else runs["precision"]
    runs["label"] = label.fillna(runs["precision"]).astype(str)
    runs["variant"] = runs["label"].map(variant)
    runs["seed"] = _col(runs, "train.seed")
    parent_dir = _col(runs, "train.branch_from", numeric=False)
    runs["parent"] = [
        names.get(str(p).rstrip("/").rsplit("/", 1)[-1]) if isinstance(p, str) and p else None
        for p in parent_dir
    ]
    runs["branch_step"] = _col(runs, "train.branch_step")
    own = _col(runs, "twin_final_val_loss")
    by_run = dict(zip(runs["run"], own, strict=True))
    inherited = runs["parent"].map(lambda p: by_run.get(p, np.nan) if p else np.nan)
    runs["reference"] = own.fillna(inherited)
    runs["ratio"] = runs["final_val_loss"] / runs["reference"]
    diverged = runs["status"].eq("diverged")
    runs["blew_up"] = diverged | (runs["ratio"] >= BLOWUP)
    runs["twin_worse"] = ~diverged & (runs["ratio"] <= 1 / BLOWUP)
    unrecovered = runs["spike_step"].notna() & runs["recovered"].eq(False).fillna(False).astype(bool)
    runs["finished"] = runs["status"].isin(FINISHED)  # done or diverged: a run with an outcome
    runs["stable"] = ~(runs["blew_up"] | unrecovered) & runs["finished"]
    twin = _col(runs, "twin", numeric=False).eq(True)
    twin_div = _col(runs, "twin_diverged_step").notna()
    twin_spike = _col(runs, "twin_spike_step").notna()
    twin_rec = _col(runs, "twin_recovered", numeric=False).eq(True)
    runs["twin_stable"] = np.where(twin, ~twin_div & (~twin_spike | twin_rec), np.nan)
    return runs.reset_index(drop=True)


def with_branch_points(runs: pd.DataFrame, fractions: list[float] | None) -> pd.DataFrame:
    """``runs`` with ``branch_at``: for each branch, which of ``fractions`` (the sweep's
    ``sweep.branch_at``) put it at its step, by the sweeper's own rule (``records.branch_fraction``
    on the parent's spike and its checkpoint cadence); NaN for parents, fixed-step branches and
    sweeps without fractions."""
    from records import branch_fraction

    runs = runs.copy()
    runs["branch_at"] = np.nan
    if runs.empty or not fractions:
        return runs
    by_run = runs.set_index("run")
    every = _col(runs, "train.ckpt_every")
    for i, r in runs.iterrows():
        p = r["parent"]
        if not p or p not in by_run.index or pd.isna(r["branch_step"]) or pd.isna(every[i]):
            continue
        parent = by_run.loc[p]
        summary = {
            k: (None if pd.isna(parent.get(k)) else float(parent.get(k)))
            for k in ("spike_step", "diverged_step")
            if k in parent
        }
        f = branch_fraction(summary, int(r["branch_step"]), int(every[i]), list(fractions))
        runs.loc[i, "branch_at"] = np.nan if f is None else f
    return runs


def onset(curve: pd.DataFrame, fallback: float | None) -> float | None:
    """The onset step of a blow-up in one run's metrics rows (see the module docstring)."""
    c = curve.dropna(subset=["loss"]).sort_values("step")
    loss = c["loss"].to_numpy(dtype=float)
    if loss.size > 1:
        low = np.minimum.accumulate(np.where(np.isfinite(loss), loss, np.inf))
        jump = np.flatnonzero(~np.isfinite(loss[1:]) | (loss[1:] > ONSET * low[:-1]))
        if jump.size:
            return float(c["step"].to_numpy()[jump[0] + 1])
    return fallback


def _clip_mean(rows: pd.DataFrame) -> pd.Series:
    cols = [c for c in rows.columns if c.startswith("clip_ln/")]
    return rows[cols].mean(axis=1) if cols else pd.Series(np.nan, index=rows.index)


def probes(runs: pd.DataFrame) -> pd.DataFrame:
    """The rows of every run's ``probe.jsonl`` (``train.probe``), with the run's ``run`` column."""
    return pd.DataFrame(run_rows(runs, PROBE))


def _probe_at(probe: pd.DataFrame, run: str | None, before: float | None = None) -> tuple[float, float]:
    """(step, probe_cos) of ``run``'s first checkpoint, or of its last one before ``before``."""
    if run is None or probe.empty:
        return math.nan, math.nan
    p = probe[probe["run"] == run].sort_values("step")
    if before is not None:
        p = p[p["step"] < before]
    if p.empty:
        return math.nan, math.nan
    r = p.iloc[-1] if before is not None else p.iloc[0]
    return float(r["step"]), float(r["probe_cos"])


def control_run(runs: pd.DataFrame, seed: Any, lr: Any = None) -> pd.Series | None:
    """The control of a seed: its phase-1 run with γ/β unquantized (same init and batches), or None;
    at learning rate ``lr`` where given (a sweep with an LR axis has a control per LR)."""
    ctrl = at_lr(runs[runs["parent"].isna() & runs["norm_affine"].eq("none") & runs["seed"].eq(seed)], lr)
    return ctrl.iloc[0] if not ctrl.empty else None


def at_lr(runs: pd.DataFrame, lr: Any) -> pd.DataFrame:
    """The runs that trained at learning rate ``lr``, by each run's own ``train.lr``: a sweep with an LR
    axis (hydra.sweeper.params) holds several under one launch setting. A record without the field ran
    at its sweep's LR and stays; ``lr`` None keeps every run."""
    if lr is None or pd.isna(lr) or "train.lr" not in runs:
        return runs
    own = pd.to_numeric(runs["train.lr"], errors="coerce")
    return runs[own.isna() | _same_lr(own, float(lr))]


def _same_lr(a: Any, b: Any) -> Any:
    """Equal learning rates (elementwise): the same number as written in two records' configs."""
    return np.isclose(a, b, rtol=1e-9, atol=0.0)


def mechanism(runs: pd.DataFrame, cur: pd.DataFrame) -> pd.DataFrame:
    """One row per blown-up phase-1 run: its onset, the clip fraction and twin cosine before the onset
    and the cosine early in the run (see the module docstring)."""
    out = []
    probe = probes(runs)
    parents = runs[runs["parent"].isna()]
    for _, r in runs[runs["blew_up"] & runs["parent"].isna()].iterrows():
        c = cur[cur["run"] == r["run"]].sort_values("step")
        fallback = _get(r, "spike_step") or _get(r, "diverged_step")
        t = onset(c, fallback)
        if t is None or c.empty:
            continue
        before = c[(c["step"] < t) & (c["step"] >= t - WINDOW)]
        early = c[c["step"] <= WINDOW]
        cos = c["twin_cos"] if "twin_cos" in c else pd.Series(dtype=float)
        clip_cols = [k for k in c.columns if k.startswith("clip_ln/")]
        row = {
            "run": r["run"],
            "label": r["label"],
            "seed": r["seed"],
            "onset": t,
            "clip_before": float(_clip_mean(before).median()) if not before.empty else np.nan,
            "clip_max_before": float(before[clip_cols].max(axis=1).median()) if clip_cols else np.nan,
            "cos_early": float(cos[early.index].median()) if "twin_cos" in c else np.nan,
            "cos_before": float(cos[before.index].median()) if "twin_cos" in c else np.nan,
        }
        if not probe.empty and (probe["run"] == r["run"]).any():
            control = control_run(parents, r["seed"], r.get("train.lr"))
            _, row["probe_cos_early"] = _probe_at(probe, r["run"])
            row["probe_step"], row["probe_cos_before"] = _probe_at(probe, r["run"], before=t)
            ctrl = control["run"] if control is not None else None
            _, row["probe_cos_control"] = _probe_at(probe, ctrl, before=row["probe_step"] + 1)
        out.append(row)
    return pd.DataFrame(out)


def _median(rows: pd.DataFrame, key: str) -> float:
    return (
        float(pd.to_numeric(rows[key], errors="coerce").median())
        if key in rows and not rows.empty
        else np.nan
    )


def adam_state(runs: pd.DataFrame, cur: pd.DataFrame, window: int = ADAM_WINDOW) -> pd.DataFrame:
    """One row per phase-1 run whose metrics log Adam's state: before its onset (or, for a run that did
    not blow up, before the median onset of those that did), the lead of ``adam_gv_max`` over the onset,
    its peak, and ``adam_gv/*`` at its branch points (see the module docstring)."""
    if cur.empty or "adam_gv_max" not in cur:
        return pd.DataFrame()
    parents = runs[runs["parent"].isna()]
    curves = {r: c.sort_values("step") for r, c in cur.groupby("run") if c["adam_gv_max"].notna().any()}
    onsets = {}
    for _, r in parents[parents["blew_up"] & parents["run"].isin(list(curves))].iterrows():
        t = onset(curves[r["run"]], _get(r, "spike_step") or _get(r, "diverged_step"))
        if t is not None:
            onsets[r["run"]] = t
    typical = float(np.median(list(onsets.values()))) if onsets else np.nan
    branch_steps = runs[runs["parent"].notna()].groupby("parent")["branch_step"].min()
    out = []
    for _, r in parents[parents["run"].isin(list(curves))].iterrows():
        c = curves[r["run"]]
        t = onsets.get(r["run"], typical)
        row: dict[str, Any] = {"run": r["run"], "seed": r["seed"], "blew_up": bool(r["blew_up"]), "onset": t}
        if not math.isnan(t):
            before = c[(c["step"] < t) & (c["step"] >= t - window)]
            for key, name in (
                ("adam_gv_max", "gv_max_before"),
                ("adam_gv/matrix", "gv_before"),
                ("adam_gv/norm", "gv_norm_before"),
                ("adam_upd/matrix", "upd_before"),
                ("twin_adam_upd/matrix", "twin_upd_before"),
                ("twin_adam_gv_max", "twin_gv_max_before"),
            ):
                row[name] = _median(before, key)
            near = c[(c["step"] >= t - WINDOW) & (c["step"] <= t + WINDOW)]
            row["gv_max_peak"] = float(near["adam_gv_max"].max()) if not near.empty else np.nan
            above = near[near["adam_gv_max"] > 1.0]
            row["lead"] = float(above["step"].iloc[0] - t) if r["blew_up"] and not above.empty else np.nan
        b = branch_steps.get(r["run"], np.nan)
        if not pd.isna(b):
            at = c[c["step"] <= b].tail(1)
            row["branch_step"] = float(b)
            row["gv_at_branch"] = _median(at, "adam_gv/matrix")
            row["gv_norm_at_branch"] = _median(at, "adam_gv/norm")
        out.append(row)
    return pd.DataFrame(out)


def adam_after_branch(runs: pd.DataFrame, cur: pd.DataFrame, steps: int = ADAM_WINDOW) -> pd.DataFrame:
    """One row per branch whose metrics log Adam's state: its normalized step and gradient-to-memory
    ratio (``adam_upd/matrix``, ``adam_gv/matrix``; medians) over the ``steps`` steps after its branch
    point, against its parent's over the ``steps`` before it; the branch's final val loss over its
    reference (``ratio``: its own twin's, else its parent's twin's) and over its parent's twin's
    (``ratio_parent_twin``)."""
    if cur.empty or "adam_gv_max" not in cur:
        return pd.DataFrame()
    twin = dict(
        zip(
            runs["run"], runs["twin_final_val_loss"] if "twin_final_val_loss" in runs else np.nan, strict=True
        )
    )
    curves = dict(tuple(cur.groupby("run")))
    empty = cur.iloc[0:0]
    out = []
    for _, b in runs[runs["parent"].notna() & runs["finished"]].iterrows():
        k = b["branch_step"]
        c, p = curves.get(b["run"], empty), curves.get(b["parent"], empty)
        after = c[(c["step"] > k) & (c["step"] <= k + steps)]
        before = p[(p["step"] <= k) & (p["step"] > k - steps)]
        if after.empty or "adam_upd/matrix" not in after or after["adam_upd/matrix"].isna().all():
            continue
        out.append(
            {
                "run": b["run"],
                "parent": b["parent"],
                "variant": b["variant"],
                "seed": b["seed"],
                "branch_step": k,
                "upd_before": _median(before, "adam_upd/matrix"),
                "upd_after": _median(after, "adam_upd/matrix"),
                "gv_before": _median(before, "adam_gv/matrix"),
                "gv_after": _median(after, "adam_gv/matrix"),
                "stable": bool(b["stable"]),
                "ratio": float(b["ratio"]),
                "ratio_parent_twin": float(b["final_val_loss"] / twin.get(b["parent"], np.nan)),
            }
        )
    return pd.DataFrame(out)


def fp32_siblings(runs: pd.DataFrame) -> pd.DataFrame:
    """Each finished branch with MX kept, against the fp32 branch of the same parent at the same step
    with the same optimizer settings (betas, LR): what the precision costs once the optimizer is the
    same, on the same weights and moments at the branch point. One row per pair: ``ratio`` = the MX
    branch's final val loss over its fp32 sibling's."""
    if runs.empty or "precision_final" not in runs:
        return pd.DataFrame()
    done = runs[runs["parent"].notna() & runs["finished"]]
    # the optimizer settings as written in each record; a missing one (the default) matches a missing one
    betas = _col(done, "train.betas", numeric=False).map(betas_of)
    key = pd.DataFrame({"parent": done["parent"], "branch_step": done["branch_step"], "betas": betas,
                        "lr": _col(done, "train.lr")})  # fmt: skip
    cols = ["variant", "seed", "final_val_loss", "stable"]
    rows = pd.concat([key, done[cols]], axis=1)
    fp32 = done["precision_final"].eq("fp32")  # the one precision label (records.precision) of the policy
    pairs = rows[~fp32].merge(rows[fp32], on=list(key.columns), suffixes=("", "_fp32"))
    if pairs.empty:
        return pd.DataFrame()
    return pd.DataFrame(
        {
            "variant": pairs["variant"],
            "sibling": pairs["variant_fp32"],
            "parent": pairs["parent"],
            "seed": pairs["seed"],
            "branch_step": pairs["branch_step"],
            "ratio": pairs["final_val_loss"] / pairs["final_val_loss_fp32"],
            "stable": pairs["stable"].astype(bool),
            "sibling_stable": pairs["stable_fp32"].astype(bool),
        }
    )


STEP_WINDOW = (100, 200)
"""Logged steps over which ``step_source`` takes each run's normalized step: after Adam's first
steps (m̂/√v̂ ≈ ±1 at step 1) have washed out, before every onset of the runs that set the question
(proxy_mechanism_d128_adam_state: all ≥ 200). Fixed in proxy_mechanism_d128_step_source's header."""


def step_source(runs: pd.DataFrame, cur: pd.DataFrame, window: tuple[int, int] = STEP_WINDOW) -> pd.DataFrame:
    """One row per finished phase-1 run that logs Adam's state: ``upd`` = the median normalized step
    RMS(m̂/√v̂) of its Linear weights (``adam_upd/matrix``) over the logged steps in ``window``
    (inclusive) that precede its own onset, ``upd_norm`` the same for the norm parameters,
    ``twin_upd`` its fp32 twin's at the same steps, ``upd_vs_twin`` their ratio, ``gv`` the median
    Σg²/Σv̂ of the Linear weights there and ``consistency`` = ``upd``/√``gv`` (each also its twin's,
    ``twin_*``), ``loss_vs_twin`` its train loss over its twin's there, ``clip_ln`` γ's clip fraction there
    (mean over the LayerNorms, median over the steps), and the run's
    outcome (``blew_up``, ``onset``, ``ratio`` = final val loss / twin's). A run whose onset comes
    before ``window`` starts has no steps to read (NaN): with a fixed window the precisions are
    compared at the same steps of training."""
    if cur.empty or "adam_upd/matrix" not in cur:
        return pd.DataFrame()
    curves = {r: c.sort_values("step") for r, c in cur.groupby("run") if c["adam_upd/matrix"].notna().any()}
    lo, hi = window
    out = []
    for _, r in runs[runs["parent"].isna() & runs["finished"] & runs["run"].isin(list(curves))].iterrows():
        c = curves[r["run"]]
        t = onset(c, _get(r, "spike_step") or _get(r, "diverged_step")) if r["blew_up"] else None
        read = c[(c["step"] >= lo) & (c["step"] <= hi) & (c["step"] < (t if t is not None else math.inf))]
        row = {
            "run": r["run"],
            "label": r["label"],
            "seed": r["seed"],
            "blew_up": bool(r["blew_up"]),
            "onset": np.nan if t is None else float(t),
            "ratio": float(r["ratio"]),
            "twin_final_val_loss": float(_get(r, "twin_final_val_loss") or np.nan),
            "upd": _median(read, "adam_upd/matrix"),
            "upd_norm": _median(read, "adam_upd/norm"),
            "gv": _median(read, "adam_gv/matrix"),
            "loss_vs_twin": float((read["loss"] / read["twin_loss"]).median())
            if "twin_loss" in read and read["twin_loss"].notna().any()
            else np.nan,
            "clip_ln": float(_clip_mean(read).median()),
        }
        for key in ("upd", "gv"):  # the twin logs at its own cadence (train.twin_every)
            col = f"twin_adam_{key}/matrix"
            row[f"twin_{key}"] = _median(read.dropna(subset=[col]), col) if col in read else np.nan
        row["upd_vs_twin"] = row["upd"] / row["twin_upd"]
        for who in ("", "twin_"):
            gv = row[f"{who}gv"]
            row[f"{who}consistency"] = row[f"{who}upd"] / math.sqrt(gv) if gv > 0 else np.nan
        out.append(row)
    return pd.DataFrame(out)


def paired_steps(source: pd.DataFrame, reference: str) -> pd.DataFrame:
    """Per precision of ``step_source``'s frame other than ``reference``: on the seeds both ran, how
    often its normalized step is below the reference precision's of the same seed (same init, same
    batches), the median ratio, and a two-sided sign test."""
    if source.empty or reference not in set(source["label"]):
        return pd.DataFrame()
    wide = source.pivot_table(index="seed", columns="label", values="upd")
    rows = []
    for label in [lab for lab in dict.fromkeys(source["label"]) if lab != reference]:
        both = wide[[label, reference]].dropna()
        lower, tied = int((both[label] < both[reference]).sum()), int((both[label] == both[reference]).sum())
        n = len(both) - tied
        rows.append(
            {
                "variant": label,
                "seeds": len(both),
                f"below {reference}": f"{lower}/{n}",
                f"step / {reference}'s (median)": float((both[label] / both[reference]).median()),
                "sign test p": exact_p(lower, n) if n else np.nan,  # no pair differs: no test
            }
        )
    return pd.DataFrame(rows)


def step_threshold(source: pd.DataFrame) -> float:
    """The normalized step (``step_source``'s ``upd``) that best tells the runs that blew up from those
    that did not: the midpoint between two neighbouring sorted steps that maximizes the balanced
    accuracy of "blows up iff step > threshold" (the lowest such midpoint on ties). NaN without both
    outcomes."""
    read = source.dropna(subset=["upd"])
    if read["blew_up"].nunique() < 2:
        return np.nan
    values = np.sort(read["upd"].unique())
    cuts = (values[:-1] + values[1:]) / 2
    blew = read["blew_up"].to_numpy(bool)
    best, cut = -1.0, np.nan
    for c in cuts:
        above = read["upd"].to_numpy() > c
        score = (above[blew].mean() + (~above[~blew]).mean()) / 2
        if score > best:
            best, cut = score, float(c)
    return cut


def step_prediction(source: pd.DataFrame, threshold: float) -> dict[str, Any]:
    """How well "blows up iff step > ``threshold``" predicts the runs of ``source``: the counts of
    the confusion table, the runs left out (blew up before the step window, so no step to read),
    the balanced accuracy and a one-sided Fisher exact p of the 2 × 2 table."""
    from scipy.stats import fisher_exact

    read = source.dropna(subset=["upd"])
    above, blew = read["upd"] > threshold, read["blew_up"].astype(bool)
    tp, fn = int((above & blew).sum()), int((~above & blew).sum())
    fp, tn = int((above & ~blew).sum()), int((~above & ~blew).sum())
    sens = tp / (tp + fn) if tp + fn else np.nan
    spec = tn / (tn + fp) if tn + fp else np.nan
    return {
        "threshold": threshold,
        "runs": len(read),
        "unread": int(len(source) - len(read)),
        "hit": tp,
        "miss": fn,
        "false alarm": fp,
        "correct rejection": tn,
        "balanced accuracy": (sens + spec) / 2,
        "p (Fisher, one-sided)": fisher_exact([[tp, fn], [fp, tn]], alternative="greater")[1],
    }


def cosine_by_seed(runs: pd.DataFrame, cur: pd.DataFrame, start: int = WINDOW) -> pd.DataFrame:
    """Per seed and phase-1 variant: the median twin cosine from step ``start`` to the run's onset (or
    its end), one column per variant. Seeds share init and batches across variants, so the columns
    compare the same trajectories' starting points with and without γ quantized."""
    rows = []
    for _, r in runs[runs["parent"].isna()].iterrows():
        c = cur[cur["run"] == r["run"]].sort_values("step")
        if c.empty or "twin_cos" not in c:
            continue
        t = onset(c, None) if r["blew_up"] else None
        c = c[(c["step"] >= start) & (c["step"] < (t if t is not None else math.inf))]
        rows.append({"seed": r["seed"], "variant": r["label"], "cos": float(c["twin_cos"].median())})
    if not rows:
        return pd.DataFrame()
    return pd.DataFrame(rows).pivot_table(index="seed", columns="variant", values="cos").reset_index()


def exact_p(k: int, n: int, alternative: str = "two-sided") -> float:
    """Exact binomial p of ``k`` of ``n`` fair coin flips: the sign test over the pairs that differ, and
    McNemar's test over the discordant pairs (``alternative="greater"``: more than half went ``k``'s
    way). 1 where nothing differs (n = 0): no evidence either way."""
    if not n:
        return 1.0
    from scipy.stats import binomtest

    return float(binomtest(k, n, alternative=alternative).pvalue)


def rate_interval(k: int, n: int, confidence: float = 0.95) -> tuple[float, float]:
    """Exact (Clopper-Pearson) interval of a rate seen as ``k`` of ``n``: where the true blow-up rate
    can lie. Its width shrinks only as 1/√n: 8 of 16 leaves 0.25–0.75, too wide to tell 1/2 from 2/3."""
    if not n:
        return 0.0, 1.0
    from scipy.stats import binomtest

    ci = binomtest(k, n).proportion_ci(confidence_level=confidence, method="exact")
    return float(ci.low), float(ci.high)


def outcomes(runs: pd.DataFrame) -> pd.DataFrame:
    """Per phase-1 variant (the precision of the parents): seeds, how many blew up (diverged or ≥ 2×
    the twin), how many are stable, how many twins are stable, how many twins ended ≥ 2× the run (the
    rule's mirror), the twins' median final loss, the spread of final loss / twin and the onset-free
    spike steps."""
    parents = runs[runs["parent"].isna()]
    rows = []
    for label, g in parents.groupby("label", sort=False):
        twins = g["twin_stable"].dropna()
        rows.append(
            {
                "variant": label,
                "seeds": int(g["seed"].nunique()),
                "blew up": int(g["blew_up"].sum()),
                "stable": int(g["stable"].sum()),
                "twin stable": f"{int(twins.astype(bool).sum())}/{len(twins)}" if len(twins) else "–",
                f"twin ≥ {BLOWUP:g}× run": int(g["twin_worse"].sum()),
                "twin final (median)": float(g["reference"].median()),
                "final / twin (median)": float(g["ratio"].median()),
                "final / twin (range)": value_range(g["ratio"]),
                "spike steps": ", ".join(str(int(s)) for s in sorted(g["spike_step"].dropna())) or "–",
            }
        )
    return pd.DataFrame(rows)


def branch_outcomes(runs: pd.DataFrame) -> pd.DataFrame:
    """Per intervention (and per branch point, where ``runs`` has ``with_branch_points``' column):
    branches, how many avoided the blow-up (stable: ended < 2× the parents' twin, no divergence, no
    unrecovered spike), against the parents they came from (which blew up how often). Only finished
    branches (done or diverged) count: one still running or interrupted has no outcome yet."""
    branches = runs[runs["parent"].notna() & runs["finished"]]
    if branches.empty:
        return pd.DataFrame()
    blew = dict(zip(runs["run"], runs["blew_up"], strict=True))
    points = "branch_at" in branches and branches["branch_at"].notna().any()
    keys = ["branch_at", "variant"] if points else ["variant"]
    if points:
        branches = branches.sort_values("branch_at", kind="stable")
    rows = []
    for key, g in branches.groupby(keys, sort=False, dropna=False):
        name = key[-1]
        rows.append(
            {
                **({"branch at (× spike step)": key[0]} if points else {}),
                "intervention": name,
                "branches": len(g),
                "avoided blow-up": int(g["stable"].sum()),
                "blew up": int(g["blew_up"].sum()),
                "parents that blew up": int(sum(bool(blew.get(p)) for p in g["parent"])),
                "final / twin (median)": float(g["ratio"].median()),
                "branch steps": value_range(g["branch_step"], fmt="{:.0f}"),
            }
        )
    return pd.DataFrame(rows)


def optimizer_branches(runs: pd.DataFrame) -> dict[str, str]:
    """The branch variants that changed the optimizer at their branch point (their record's Adam betas
    or learning rate differ from their parent's), each → what it changed (``"Adam's betas to [0.9,
    0.95]"``). They keep the parent's precision, weights and moments."""
    if runs.empty:
        return {}
    by_run = runs.set_index("run")
    out = {}
    for _, b in runs[runs["parent"].notna()].iterrows():
        if b["parent"] not in by_run.index:
            continue
        parent = by_run.loc[b["parent"]]
        changed = []
        if "train.betas" in runs and betas_of(b["train.betas"]) != betas_of(parent["train.betas"]):
            changed.append(f"Adam's betas to {list(betas_of(b['train.betas']))}")
        lr, was = (pd.to_numeric(r.get("train.lr"), errors="coerce") for r in (b, parent))
        if not (pd.isna(lr) or pd.isna(was) or _same_lr(lr, was)):
            changed.append(f"the LR from {was:g} to {lr:g}")
        if changed:
            out.setdefault(b["variant"], " and ".join(changed))
    return out


def betas_of(value: Any) -> tuple[float, ...] | None:
    """A record's ``train.betas`` (a list, its JSON text, or missing: the task's default) as a tuple."""
    if isinstance(value, str):
        value = json.loads(value)
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return None
    return tuple(float(b) for b in value)


def paired_rescues(branches: pd.DataFrame, variant: str, against: str) -> pd.DataFrame:
    """``variant`` against ``against`` on the same parents, per branch point: of the parents branched
    into both (finished), how many each avoided the blow-up in, and how many only one did; the exact
    McNemar p (two-sided binomial test on those discordant parents: is one more often the rescue?)."""
    done = branches[branches["finished"] & branches["variant"].isin([variant, against])]
    points = "branch_at" in done and done["branch_at"].notna().any()
    rows = []
    for point, g in done.groupby("branch_at") if points else [(None, done)]:
        wide = g.pivot_table(index="parent", columns="variant", values="stable", aggfunc="first")
        if variant not in wide or against not in wide:
            continue
        wide = wide.dropna().astype(bool)
        only_v = int((wide[variant] & ~wide[against]).sum())
        only_a = int((wide[against] & ~wide[variant]).sum())
        n = only_v + only_a
        rows.append(
            {
                **({"branch at (× spike step)": point} if points else {}),
                "parents": len(wide),
                f"{variant} avoided": int(wide[variant].sum()),
                f"{against} avoided": int(wide[against].sum()),
                f"only {variant}": only_v,
                f"only {against}": only_a,
                "p (exact McNemar, two-sided)": exact_p(only_v, n),
            }
        )
    return pd.DataFrame(rows)


def step_times(runs: pd.DataFrame) -> pd.DataFrame:
    """Median step time per variant without and with the fp32 twin."""
    cols = [c for c in ("median_step_time", "median_step_time_with_twin") if c in runs]
    if not cols:
        return pd.DataFrame()
    t = runs[runs["parent"].isna()].groupby("label", sort=False)[cols].median().reset_index()
    t = t.rename(columns={"label": "variant", "median_step_time": "step (s)"})
    if "median_step_time_with_twin" in t:
        t = t.rename(columns={"median_step_time_with_twin": "step with twin (s)"})
        t["twin overhead"] = t["step with twin (s)"] / t["step (s)"]
    return t


def value_range(s: pd.Series, fmt: str = "{:.3g}") -> str:
    """ "a–b" of the finite values of ``s`` (one value when they agree, "–" when there are none)."""
    s = pd.to_numeric(s, errors="coerce").dropna()
    if s.empty:
        return "–"
    return fmt.format(s.min()) if s.min() == s.max() else f"{fmt.format(s.min())}–{fmt.format(s.max())}"


__all__ = [
    "ADAM_WINDOW",
    "BLOWUP",
    "ONSET",
    "WINDOW",
    "adam_after_branch",
    "adam_state",
    "at_lr",
    "betas_of",
    "branch_outcomes",
    "control_run",
    "cosine_by_seed",
    "fp32_siblings",
    "mechanism",
    "onset",
    "optimizer_branches",
    "outcomes",
    "paired_rescues",
    "proxy_runs",
    "step_times",
    "value_range",
    "variant",
]
