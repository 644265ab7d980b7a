"""1.4: a late divergence (the study's canonical run diverged near step 5,090 of 9,000).

The canonical GPU preset's runs (each beside its fp32 twin), the GPU correctness check that vouches
for them, and the CPU search's late blow-ups: a blow-up after half of the run's steps while its twin
stays stable, with γ's clip fraction before the onset to tell the 0.875 clamp from other causes.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from analysis import proxy
from analysis.instability import FINISHED
from analysis.report import md_table
from analysis.results.common import Source, _Doc, _outcome, _rel
from analysis.results.presets import RECORD_DEFAULTS


def _canonical_complete(src: Source) -> bool:
    """Every run of the canonical sweep has an outcome (done or diverged)."""
    runs = src.runs if src.ran else pd.DataFrame()
    return not runs.empty and bool(runs.loc[runs["parent"].isna(), "finished"].all())


STUDY_DIVERGENCE = 5090
"""The step near which the study's canonical MX run diverged (Su et al.; 1.4's title)."""
CANONICAL_TAIL = 500
"""Steps at the end of each canonical run that its table summarizes (clip fraction, Adam's step)."""


def _canonical_block(doc: _Doc, src: Source, figure: str = "proxy_canonical.png") -> None:
    """The canonical run's records: where each run got to (a GPU lease can end it early), its outcome
    against its fp32 twin, γ's clip fraction and Adam's normalized step over its last steps, its step
    time and the machine it ran on; the mechanism figure."""
    from analysis import plots

    runs = src.runs[src.runs["parent"].isna()]
    rows = []
    for _, r in runs.iterrows():
        c = src.cur[src.cur["run"] == r["run"]] if not src.cur.empty else pd.DataFrame()
        tail = c[c["step"] > c["step"].max() - CANONICAL_TAIL] if not c.empty else c
        step = proxy._get(r, "step")
        rows.append(
            {
                "run": r["label"],
                "steps": f"{step:,.0f} of {proxy._get(r, 'train.steps'):,.0f}" if pd.notna(step) else "–",
                "status": r["status"],
                "spike / divergence": _outcome(r) if r["finished"] else _so_far(r),
                "val loss / fp32 twin's": r["ratio"],
                f"LN-γ clip fraction (last {CANONICAL_TAIL} steps, median)": float(
                    proxy._clip_mean(tail).median()
                ),
                "Adam step RMS run / twin (same steps)": f"{proxy._median(tail, 'adam_upd/matrix'):.3f} / "
                f"{proxy._median(tail, 'twin_adam_upd/matrix'):.3f}",
                "s per step (with twin)": proxy._get(r, "median_step_time_with_twin"),
            }
        )
    where = runs.iloc[0] if len(runs) else pd.Series(dtype=object)
    gpu, torch_version = proxy._get(where, "hardware.cuda"), proxy._get(where, "versions.torch")
    machine = ", ".join(v for v in (gpu, torch_version and f"torch {torch_version}") if v)
    check = _gpu_check(src.path)
    # records made before they named their quantizer backend: the GPU check that ran them does
    backend = proxy._get(where, "quant_backend") or (check or {}).get("backend")
    doc.add(
        f"**The canonical run on a GPU** ({machine or 'machine not recorded'}; quantizer backend "
        f"{backend or 'not recorded'}; records `{_rel(src.path)}`"
        + (
            ", run by `benchmarks/gpu_check.py`, whose result is kept beside them"
            if check is not None
            else ""
        )
        + "). "
        + (
            "Every run finished."
            if _canonical_complete(src)
            else "Not every run finished: the ones marked interrupted stopped where the GPU lease ended "
            "(they checkpointed; `python launch.py -m experiment=proxy_canonical` on a GPU resumes them "
            "where their checkpoints are kept, or reruns them)."
        ),
        "",
        md_table(pd.DataFrame(rows)),
        "",
    )
    e4m3 = runs["norm_affine"].eq("fp8_e4m3") if "norm_affine" in runs else pd.Series(False, index=runs.index)
    clamped = runs[e4m3 & ~runs["finished"]]
    if len(clamped) and not clamped["blew_up"].any():
        reached, steps = int(clamped["step"].min()), int(proxy._get(clamped.iloc[0], "train.steps"))
        doc.add(
            f"The study's MX run diverged near step {STUDY_DIVERGENCE:,}; here the run with γ in E4M3 had "
            f"no spike or divergence through step {reached:,}"
            + (" (past that point)" if reached > STUDY_DIVERGENCE else "")
            + f", and its last {steps - reached:,} steps were not run.",
            "",
        )
    if _canonical_complete(src):
        steps = int(proxy._get(runs.iloc[0], "train.steps"))
        outcomes = []
        several = runs["seed"].nunique() > 1
        for _, r in runs.sort_values(["label", "seed"]).iterrows():
            # the recorded first spike (the trainer's detector, on a smoothed loss): proxy.onset's first
            # jump can be a one-step transient long before (γ in bf16 had one at step 240)
            at = r.get("spike_step") if pd.notna(r.get("spike_step")) else r.get("diverged_step")
            what = f"{r['label']}{f' seed {r.seed:.0f}' if several else ''} (γ/β {r['norm_affine']}) "
            if r["blew_up"]:
                what += "blew up" + (f" at step {at:,.0f}" if at is not None and pd.notna(at) else "")
                outcomes.append(what + f" and ended at {r['ratio']:.3g}× its twin's val loss")
            else:
                outcomes.append(what + f"did not blow up (ended at {r['ratio']:.3g}× its twin's)")
        doc.add(
            f"The study's MX run diverged near step {STUDY_DIVERGENCE:,} of {steps:,}; here "
            + "; ".join(outcomes)
            + ".",
            "",
        )
    if not src.cur.empty:
        doc.figure(plots.proxy_mechanism(src.cur, runs), figure, "the canonical run vs its fp32 twin")


def _so_far(run: pd.Series) -> str:
    """An unfinished run's outcome up to the step it reached."""
    for key, word in (("diverged_step", "diverged at"), ("spike_step", "spike at")):
        if pd.notna(run.get(key)):
            return f"{word} {run[key]:,.0f}"
    return f"none by step {run['step']:,.0f}" if pd.notna(run.get("step")) else "none recorded"


def _gpu_check(sweep: Path) -> dict[str, Any] | None:
    """The proxy step's numbers in the ``gpu_check.json`` that ``benchmarks/gpu_check.py`` wrote beside
    a sweep it ran (its quantizer backend among them); None where there is none."""
    try:
        result = json.loads((sweep / "gpu_check.json").read_text())
    except (OSError, ValueError):
        return None
    step = next((s for s in result.get("steps", []) if s.get("step") == "proxy"), {})
    return step.get("numbers") or {}


def _late_blowups(src: Source) -> list[dict[str, Any]]:
    """The phase-1 runs of one sweep that blew up after half of their steps: ``proxy.mechanism``'s row
    (onset, γ's clamp and the twin cosine before it) with whether γ was quantized and the run's fp32
    twin stayed stable (what 1.4's rule asks of a late blow-up)."""
    r, m = src.runs, src.mechanism
    if m.empty:
        return []
    by_run = r.set_index("run")
    steps = by_run["train.steps"] if "train.steps" in by_run else pd.Series(np.nan, index=by_run.index)
    m = m[m["onset"] > m["run"].map(steps) / 2]
    lrs = by_run["train.lr"] if "train.lr" in by_run else pd.Series(np.nan, index=by_run.index)
    out = []
    for run, row in zip(m["run"], m.drop(columns=["run"]).to_dict("records"), strict=True):
        quantized = by_run.at[run, "norm_affine"] != "none"  # in E4M3, or rounded to bf16
        lr = lrs.get(run)
        out.append(
            {
                "sweep": src.name,
                **row,
                "lr": lr,  # an LR-axis sweep has several
                "γ in E4M3": by_run.at[run, "norm_affine"] == "fp8_e4m3",
                "twin stable": by_run.at[run, "twin_stable"] == 1.0,
                # a γ-unquantized run is the control itself
                "γ unquantized (same seed)": _control_outcome(r, by_run.at[run, "seed"], lr)
                if quantized
                else "–",
            }
        )
    return out


def _control_outcome(runs: pd.DataFrame, seed: float, lr: float | None = None) -> str:
    """The outcome of the seed's control (``proxy.control_run``, at ``lr`` where given): "blew up",
    "stable", "unstable" (spiked, not recovered), or "–" where there is none or it has not finished."""
    c = proxy.control_run(runs, seed, lr)
    return "–" if c is None or not c["finished"] else _outcome(c, spike=False)


def _late_findings(src: Source, baseline: dict[int, Any]) -> list[str]:
    """What one late-search sweep showed, from its records: per seed, the onset of its blow-up at
    proxy_mechanism's setting (``baseline``: seed → onset step of its blown-up γ-in-E4M3 run) next
    to the onset here (the dose-response of a change that should move the clock), then γ's clamp,
    the runs against their fp32 twins, fp32 twins that went unstable, and unfinished runs."""
    runs = src.runs
    if runs.empty:
        return []
    out = []
    hot = {s: t for s, t in baseline.items() if t is not None and t == t}
    parents = runs[runs["parent"].isna()]
    status = parents["status"] if "status" in parents else pd.Series("done", index=parents.index)
    finished = status.isin(FINISHED)
    for row in src.search_rows:
        # Another teacher is another task: proxy_mechanism's onsets are no baseline for its seeds.
        own_task = row["teacher"] == RECORD_DEFAULTS["model.teacher"]
        teacher = "" if own_task else f", {row['teacher']} teacher"
        setting = (
            f"`{src.name}` ({row['d × L, batch']}{teacher}, lr {row['lr (norm ×)']}, {row['steps']} steps)"
        )
        per_seed = []
        for _, r in parents[finished].sort_values("seed").iterrows():
            curve = src.cur[src.cur["run"] == r["run"]] if not src.cur.empty else src.cur
            here = proxy.onset(curve, r.get("spike_step")) if r["blew_up"] else None
            now = "none" if here is None or here != here else f"{here:.0f}"
            was = hot.get(int(r["seed"]))
            per_seed.append(
                f"seed {int(r['seed'])} {'–' if was is None else f'{was:.0f}'} → {now}"
                if own_task
                else f"seed {int(r['seed'])} {now}"
            )
        twin_bad = [int(s) for s in parents.loc[parents["twin_stable"].eq(0.0), "seed"]]
        twin = (
            f" The fp32 twin itself went unstable in seed {', '.join(map(str, twin_bad))}: at this "
            "setting the instability is not MX's alone."
            if twin_bad
            else ""
        )
        left = int((~finished).sum())
        pending = f" {left} run(s) not finished yet, not counted." if left else ""
        onsets = "blow-up onset at proxy_mechanism's setting → here" if own_task else "blow-up onset"
        out.append(
            f"{setting}: {onsets}, per seed: "
            f"{'; '.join(per_seed) or '–'} ({row['late blow-ups']} after half of the run). Median final / "
            f"fp32 twin {row['final / twin (median)']:.2f}; γ's clip fraction (run median) "
            f"{row['γ clamped (run median)']:.2f}.{twin}{pending}"
        )
    return out
