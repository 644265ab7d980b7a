"""``python -m analysis report <sweep_dir>``: one Markdown report of a finished or half-finished sweep.

Writes into the sweep directory (or ``out``): ``report.md``, ``results.parquet``/``results.csv`` (one
row per run, ``collect``), ``curves.parquet`` (``curves``), ``fits.json`` (every fitted number) and
``figures/*.png``. Every section degrades to a sentence saying what is missing (no runs, too few runs
for a fit, no budget with three sizes …) instead of failing; unreadable records are listed at the end.

Sections: runs per precision · Chinchilla fits (with bootstrap intervals; with diverged runs for
comparison) · isoFLOP minima, frontier and effective-compute multipliers · instability maps and
curves · clip fractions · the block-size study, when the sweep holds its record.
"""

from __future__ import annotations

import datetime as dt
import importlib.util
import json
import math
import os
import warnings
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from analysis import instability, isoflop
from analysis.collect import collect, curves, export, parquet_safe, study_records
from analysis.fits import MIN_RUNS, ChinchillaFit, InsufficientData, fit_chinchilla
from records import RecordWarning

BLOCKSIZE_KIND = "block_size_study"


def md_table(df: pd.DataFrame, fmt: Mapping[str, Callable[[Any], str]] | None = None, digits: int = 4) -> str:
    """A GitHub-Markdown table (no tabulate dependency); floats to ``digits`` significant figures."""
    if df.empty:
        return "_(empty)_"
    fmt = fmt or {}

    def cell(col: str, v: Any) -> str:
        if col in fmt:
            return fmt[col](v)
        if v is None or (isinstance(v, float) and math.isnan(v)) or v is pd.NA:
            return ""
        if isinstance(v, float | np.floating):
            return f"{v:.{digits}g}"
        return str(v).replace("|", "\\|")

    cols = [str(c) for c in df.columns]
    lines = ["| " + " | ".join(cols) + " |", "|" + "|".join("---" for _ in cols) + "|"]
    for row in df.itertuples(index=False):
        lines.append("| " + " | ".join(cell(c, v) for c, v in zip(cols, row, strict=True)) + " |")
    return "\n".join(lines)


def _with_ci(value: float, ci: tuple[float, float] | None, digits: int = 4) -> str:
    if ci is None:
        return f"{value:.{digits}g}"
    return f"{value:.{digits}g} [{ci[0]:.{digits - 1}g}, {ci[1]:.{digits - 1}g}]"


class _Report:
    def __init__(self, sweeps: list[Path], out: Path, loss: str, bootstrap: int, seed: int, log):
        self.sweeps, self.out, self.loss, self.bootstrap, self.seed, self.log = (
            sweeps,
            out,
            loss,
            bootstrap,
            seed,
            log,
        )
        self.figdir = out / "figures"
        self.lines: list[str] = []
        dirs = [str(s) for s in sweeps]
        self.fits: dict[str, Any] = {"loss": loss, "sweep_dir": dirs[0] if len(dirs) == 1 else dirs}

    def add(self, *lines: str) -> None:
        self.lines.extend(lines)

    def figure(self, fig, name: str, caption: str) -> None:
        from analysis import plots

        path = plots.save(fig, self.figdir / name)
        self.add(f"![{caption}]({os.path.relpath(path, self.out)})", "")

    # -- sections --------------------------------------------------------------------------------
    # -- LM precision study (analysis.lmstudy): the law over all precisions, Δ vs bf16 -------------
    def precision_law_section(self, df: pd.DataFrame) -> None:
        """One law over every precision with its multipliers m_P (the report's first table: m_P [95 %
        CI] and Δ loss vs bf16 at the largest budget), loss vs compute with the law's L*(C), and m_P
        as a figure. Silent on a sweep without budgets; one sentence without bf16 or usable runs."""
        from analysis import lmstudy, plots

        self.fits["precision_law"] = {}
        if not lmstudy.is_compute_sweep(df):
            return
        frame = lmstudy.label_column(df)
        ref = lmstudy.reference_label(frame["label"])
        self.add("## Precision law: L(N, D, P) = E + A/(N·m_P)^α + B/D^β", "")
        if ref is None:
            self.add("No bf16 runs: the precision law needs bf16 as its reference (m = 1).", "")
            return
        curve = lmstudy.loss_vs_compute(frame, self.loss)
        if curve.empty:
            self.add(f"No finished, stable runs with a `{self.loss}` yet: no law.", "")
            return
        fit, excluded, why = None, {}, ""
        try:
            fit, excluded = lmstudy.fit_law(
                frame, self.loss, reference=ref, n_boot=self.bootstrap, seed=self.seed
            )
            if len(fit.multipliers) < 2:
                fit, why = None, "only the reference has >= 2 (N, D) points"
        except InsufficientData as e:
            why = str(e).split(": ", 1)[-1]
        except (ValueError, FloatingPointError, np.linalg.LinAlgError) as e:  # the report goes on
            why = f"the fit failed: {type(e).__name__}: {e}"
        table = lmstudy.law_table(frame, fit, self.loss, reference=ref)
        if fit is None and not (table["n_runs"] > 0)[~table["reference"]].any():
            self.add(f"Only {ref} runs have finished so far: no law and no Δ yet; its loss vs compute:", "")
        elif fit is None:
            self.add(f"Too few runs for the law ({why}); Δ vs {ref} and loss vs compute below.", "")
        else:
            ci = (
                f"95 % intervals: {fit.n_boot} within-precision bootstrap resamples"
                if fit.n_boot
                else "no bootstrap"
            )
            self.add(
                "Fitted jointly over every precision (Kumar et al. 2024, *Scaling Laws for Precision*): "
                f"E, A, B, α, β shared; a run in format P trains like a {ref} run with N·m_P parameters "
                f"(m_{ref} = 1; m_P < 1: parameters lost to the format). Huber on log {self.loss}, "
                f"finished stable runs; {ci}.",
                "",
                f"E = {fit.E:.4g}, A = {fit.A:.4g}, B = {fit.B:.4g}, α = {fit.alpha:.3f}, "
                f"β = {fit.beta:.3f}; R² (log L) = {fit.r2:.4f} over {fit.n_runs} runs.",
                "",
            )
        partial = lmstudy.fewer_budgets(frame, fit.multipliers, ref, self.loss) if fit is not None else []
        if partial:
            self.add(
                f"Still running: {', '.join(f'`{k}`' for k in partial)} "
                f"{'has' if len(partial) == 1 else 'have'} runs at fewer budgets than {ref} so far; "
                "m_P then rests on where the shared law is fitted mostly by the other formats — read the "
                "matched Δ until they catch up.",
                "",
            )
        if excluded:
            self.add(
                "Not in the law yet: " + "; ".join(f"`{k}` ({v})" for k, v in excluded.items()) + ".", ""
            )
        if len(table) > 1:
            no_pairs = "" if (table["n_pairs"] > 0).any() else f" (No run matches a {ref} run yet.)"
            self.add(
                md_table(lmstudy.display_law_table(table, ref)),
                "",
                f"Δ: {self.loss} minus {ref}'s on matched runs (same budget, shape and seed; finished, "
                "stable) at the largest budget both have; mean ± sd over seeds of each seed's mean Δ; "
                "p: paired t-test over the matched runs (* p < 0.05). Runs: finished stable / all."
                + no_pairs,
                "",
            )
        self.figure(
            plots.loss_vs_compute_plot(curve, fit, loss=self.loss),
            "loss_vs_compute.png",
            "loss vs compute: best shape per seed, mean ± sd over seeds; lines: the law's L*(C)",
        )
        if fit is not None:
            self.figure(
                plots.multiplier_plot(fit), "precision_multipliers.png", "effective-parameter multipliers"
            )
            self.fits["precision_law"] = lmstudy.fit_record(fit, excluded, table)
        else:
            self.fits["precision_law"] = {"error": why, "table": lmstudy.records(table)}

    def delta_section(self, df: pd.DataFrame) -> None:
        """Δ loss vs bf16 on matched runs over all budgets and at the largest (mean ± sd over seeds,
        significance), which formats differ significantly, whether the hybrids track bf16, and the
        W × A heatmap. Silent on a sweep with neither bf16 nor budgets; else one sentence when short."""
        from analysis import lmstudy, plots

        self.fits["deltas"] = {}
        frame = lmstudy.label_column(df)
        ref = lmstudy.reference_label(frame["label"])
        if ref is None:
            if lmstudy.is_compute_sweep(df):
                self.add("## Δ loss vs bf16 (matched runs)", "", "No bf16 runs: no Δ vs bf16.", "")
            return
        self.add(f"## Δ loss vs {ref} (matched runs)", "")
        every = lmstudy.deltas_vs_reference(frame, self.loss, ref)
        if every.empty:
            self.add(f"No finished, stable run matches a {ref} run yet (same budget, shape and seed).", "")
            return
        largest = lmstudy.deltas_vs_reference(frame, self.loss, ref, budget="largest")
        self.add(
            f"Δ = {self.loss}(P) − {self.loss}({ref}) between runs that differ only in precision (same "
            "budget, shape and seed, so the same initialisation and data order); finished, stable runs. "
            "Mean ± sd over seeds of each seed's mean Δ; Δ/L relative to the reference; p: paired t-test "
            "over the matched runs (* p < 0.05).",
            "",
            md_table(lmstudy.display_deltas(every, largest)),
            "",
            *[s for line in lmstudy.verdict(every, ref) for s in (line, "")],
        )
        missing = sorted(set(frame["label"]) - set(every["label"]) - {ref})
        if missing:
            self.add("No matched runs yet: " + ", ".join(f"`{m}`" for m in missing) + ".", "")
        if (~every["fwd_only"].astype(bool)).any():
            pair = frame.loc[frame["label"] == ref, ["w", "a"]].iloc[0] if {"w", "a"} <= set(frame) else None
            self.figure(
                plots.delta_heatmap(
                    every,
                    reference=ref,
                    reference_pair=(str(pair["w"]), str(pair["a"])) if pair is not None else ("bf16", "bf16"),
                    loss=self.loss,
                ),
                "delta_vs_bf16.png",
                "Δ loss vs bf16 by weight and activation format (all budgets)",
            )
        self.fits["deltas"] = {
            "reference": ref,
            "all_budgets": lmstudy.records(every),
            "largest_budget": lmstudy.records(largest),
        }

    def runs_section(self, df: pd.DataFrame) -> None:
        self.add("## Runs", "")
        counts = df["status"].value_counts()
        self.add("Status: " + ", ".join(f"{k} {v}" for k, v in counts.items()) + ".", "")
        g = df.groupby("precision", sort=True)
        table = pd.DataFrame(
            {
                "runs": g.size(),
                "done": g["status"].apply(lambda s: int((s == "done").sum())),
                "diverged": g["diverged"].sum().astype(int),
                "spiked": g["spiked"].sum().astype(int),
                "unstable": g["unstable"].sum().astype(int),
                "N range": g["N"].agg(lambda s: f"{instability.si(s.min())}–{instability.si(s.max())}"),
                "budgets": g["budget"].nunique(),
                f"best {self.loss}": g[self.loss].min() if self.loss in df else np.nan,
                "median step time (s)": g["median_step_time"].median(),
            }
        ).reset_index()
        self.add(md_table(table), "")

    def fits_section(self, df: pd.DataFrame) -> dict[str, ChinchillaFit]:
        self.add("## Scaling-law fits: L(N, D) = E + A/N^α + B/D^β", "")
        self.add(
            f"Huber (δ = 1e-3) on log {self.loss}, log-sum-exp form; (α, β) profile grid with E, A, B by "
            "non-negative least squares, then L-BFGS from the best starts. Finished, stable runs only. "
            f"Intervals: {self.bootstrap}-sample bootstrap, 95 %. R² on log L.",
            "",
        )
        fits: dict[str, ChinchillaFit] = {}
        rows, skipped = [], []
        c_max = float(df["budget"].max()) if df["budget"].notna().any() else 1e18
        for label, g in df.groupby("precision", sort=True):
            try:
                f = fit_chinchilla(g, self.loss, bootstrap=self.bootstrap, seed=self.seed)
            except InsufficientData as e:
                skipped.append(f"- `{label}`: too few runs for a fit ({str(e).split(': ', 1)[-1]}).")
                continue
            fits[str(label)] = f
            rows.append(
                {
                    "precision": label,
                    "n": f.n,
                    **{p: _with_ci(getattr(f, p), f.ci.get(p)) for p in ("E", "A", "B", "alpha", "beta")},
                    "R²": f"{f.r2:.4f}",
                    f"N_opt({instability.sci(c_max)})": instability.si(float(f.n_opt(c_max))),
                    "caveats": "; ".join(f.caveats()) or "–",
                }
            )
        if rows:
            self.add(md_table(pd.DataFrame(rows)), "")
        else:
            self.add(
                f"Too few runs for any fit (each precision needs >= {MIN_RUNS} finished runs "
                "spanning >= 2 model sizes and >= 2 token counts).",
                "",
            )
        if skipped:
            self.add(*skipped, "")
        self.fits["chinchilla"] = {k: f.to_dict() for k, f in fits.items()}
        # With the diverged runs, to show how they distort the fit.
        distorted = {}
        for label, g in df.groupby("precision", sort=True):
            if str(label) not in fits or not g["unstable"].any():
                continue
            try:
                distorted[str(label)] = fit_chinchilla(g, self.loss, include_diverged=True, bootstrap=0)
            except InsufficientData:
                continue
        self.fits["chinchilla_with_diverged"] = {k: f.to_dict() for k, f in distorted.items()}
        if distorted:
            self.add("### With diverged / unrecovered runs included", "")
            rows = [
                {
                    "precision": k,
                    "n": f.n,
                    "α": f"{f.alpha:.3f} (stable {fits[k].alpha:.3f})",
                    "β": f"{f.beta:.3f} (stable {fits[k].beta:.3f})",
                    "E": f"{f.E:.4g} (stable {fits[k].E:.4g})",
                    "R²": f"{f.r2:.4f}",
                }
                for k, f in distorted.items()
            ]
            self.add(md_table(pd.DataFrame(rows)), "")
        if fits:
            from analysis import plots

            self.figure(
                plots.fit_vs_data(df, fits, self.loss), "fit_vs_data.png", "fitted L(N, D) against data"
            )
            if distorted:
                fig = plots.diverged_fit_comparison(df, fits, distorted, self.loss)
                self.figure(fig, "fit_diverged.png", "fits with and without diverged runs")
        return fits

    def isoflop_section(self, df: pd.DataFrame) -> None:
        from analysis import plots

        self.add("## IsoFLOP analysis", "")
        minima = isoflop.isoflop_minima(df, self.loss)
        self.fits["isoflop_minima"] = json.loads(minima.to_json(orient="records"))
        if minima.empty:
            self.add("No (precision, budget) has finished runs at >= 3 model sizes: no isoFLOP parabola.", "")
            self.fits["frontier"], self.fits["multipliers"] = {}, []
            return
        show = minima[
            ["precision", "budget", "n_sizes", "N_opt", "D_opt", "L_opt", "interior", "N_best", "L_best"]
        ]
        self.add(
            "Per budget, a parabola of the loss in log₁₀ N; N_opt/L_opt at its vertex (interior: inside "
            "the sizes run — only those feed the frontier).",
            "",
            md_table(
                show,
                {
                    "budget": instability.sci,
                    "N_opt": instability.si,
                    "D_opt": instability.si,
                    "N_best": instability.si,
                },
            ),
            "",
        )
        self.figure(plots.isoflop_curves(df, minima, self.loss), "isoflop.png", "isoFLOP curves")
        frontiers = isoflop.fit_frontiers(minima)
        self.fits["frontier"] = {k: f.to_dict() for k, f in frontiers.items()}
        if not frontiers:
            self.add("No precision has interior minima at >= 2 budgets: no frontier fit.", "")
            self.fits["multipliers"] = []
            return
        rows = [
            {
                "precision": k,
                "a": f"{f.a:.4g}",
                "b": f"{f.b:.4f}",
                "R² (L*)": f"{f.loss.r2:.4f}",
                "N* ∝ C^m, m": f"{f.n_opt.exponent:.3f}",
                "budgets": len(f.budgets),
            }
            for k, f in frontiers.items()
        ]
        self.add("### Frontier L*(C) = a·C^−b and N*(C) = k·C^m", "", md_table(pd.DataFrame(rows)), "")
        self.figure(plots.frontier(minima, frontiers), "frontier.png", "compute frontier")
        ref = isoflop.reference_precision(frontiers)
        mult = isoflop.compute_multipliers(frontiers, ref)
        self.fits["multipliers"] = json.loads(mult.to_json(orient="records"))
        if ref is None:
            self.add("No bf16 or fp32 frontier: effective-compute multipliers need a reference.", "")
            return
        self.add(
            f"### Effective-compute multiplier against {ref}",
            "",
            f"Compute the {ref} frontier needs to reach each precision's frontier loss, divided by the "
            "precision's own compute (< 1: the precision needs more compute for the same loss).",
            "",
        )
        summary = mult[mult["precision"] != ref].groupby("precision")["multiplier"]
        table = pd.DataFrame(
            {
                "geometric mean": summary.apply(lambda s: float(np.exp(np.log(s).mean()))),
                "min": summary.min(),
                "max": summary.max(),
            }
        ).reset_index()
        self.add(md_table(table), "")
        if not table.empty:
            self.figure(plots.multipliers(mult[mult["precision"] != ref]), "multipliers.png", "multipliers")

    def instability_section(self, df: pd.DataFrame, cur: pd.DataFrame) -> None:
        from analysis import plots

        self.add("## Instability", "")
        finished = df[df["status"].isin(instability.FINISHED)]
        if finished.empty:
            self.add("No finished runs yet.", "")
        else:
            t = instability.instability_map(finished, "pair", "budget")
            self.fits["instability_pair_budget"] = json.loads(t.to_json(orient="records"))
            wide = instability.pivot(t, "frac_unstable", "pair", "budget")
            counts = instability.pivot(t, "n", "pair", "budget")
            fig = plots.heatmap(
                wide, counts=counts, title="unstable fraction (diverged, or spiked and not recovered)"
            )
            self.figure(fig, "instability_pair_budget.png", "unstable fraction by precision pair and budget")
            t2 = instability.instability_map(finished, "pair", "size")  # for the pairs with instabilities
            flagged = sorted(set(t2.loc[t2["n_unstable"] + t2["n_spiked"] > 0, "pair"]))
            panels = {}
            for pair in flagged or ["all precisions"]:
                sub = finished if not flagged else finished[finished["pair"] == pair]
                t3 = instability.instability_map(sub.assign(pair=pair), "size", "tokens_per_param_bin")
                wide3 = instability.pivot(t3, "frac_unstable", "size", "tokens_per_param_bin")
                wide3.columns.name, wide3.index.name = "tokens per parameter", "model size N"
                panels[pair] = (wide3, instability.pivot(t3, "n", "size", "tokens_per_param_bin"))
            title = "unstable fraction by model size and tokens/param" + (
                " (pairs with spikes or divergence)" if flagged else " (no instabilities: all runs pooled)"
            )
            self.figure(plots.heatmap_grid(panels, title=title), "instability_size_tpp.png", title)
            by_prec = t.groupby("pair")[["n", "n_diverged", "n_spiked", "n_unstable"]].sum().reset_index()
            self.add(md_table(by_prec), "")
        if cur.empty:
            self.add("No metrics.jsonl rows: no curves.", "")
            return
        self.figure(plots.loss_curves(cur), "loss_curves.png", "loss curves")
        if "grad_norm" in cur:
            self.figure(plots.grad_norm_curves(cur), "grad_norm_curves.png", "grad-norm curves")
        clip = instability.clip_summary(cur)
        if len(clip.columns) > 2:
            coords = cur.drop_duplicates("run")[["run", "precision", "tokens_per_param"]]
            clip = clip.merge(coords, on="run", how="left")
            self.add("### Clip fractions (values at the format's largest magnitude)", "")
            self.figure(plots.clip_curves(clip), "clip_fractions.png", "LN-γ and activation clip fractions")
        else:
            self.add("No clip fractions logged (no MX-quantized weights or activations in these runs).", "")

    def proxy_section(self, df: pd.DataFrame, cur: pd.DataFrame) -> None:
        """The instability study's proxy: verdicts against the fp32 twin, the mechanism before each
        blow-up, the interventions, step time with and without the twin (``analysis.proxy``)."""
        from analysis import plots, proxy

        runs = proxy.proxy_runs(df)
        if runs.empty or not (runs["reference"].notna().any() or runs["parent"].notna().any()):
            return
        self.add(
            "## Proxy: MX against its fp32 twin",
            "",
            f"Blew up: diverged, or final val loss ≥ {proxy.BLOWUP:g}× the fp32 twin's (same init and "
            "batches; a branch's reference is its parent's twin). Stable: not blown up and no "
            "unrecovered spike.",
            "",
        )
        table = proxy.outcomes(runs)
        self.add(md_table(table), "")
        self.fits["proxy_outcomes"] = json.loads(table.to_json(orient="records"))
        mech = proxy.mechanism(runs, cur)
        if not mech.empty:
            self.add(
                f"### Before each blow-up (median over the {proxy.WINDOW} steps before its onset)",
                "",
                md_table(mech.drop(columns=["run"])),
                "",
            )
            self.fits["proxy_mechanism"] = json.loads(mech.to_json(orient="records"))
        if not cur.empty:
            self.figure(plots.proxy_mechanism(cur, runs), "proxy_mechanism.png", "MX vs fp32 twin")
        branches = proxy.branch_outcomes(runs)
        if not branches.empty:
            self.add("### Interventions (branches)", "", md_table(branches), "")
            self.fits["proxy_branches"] = json.loads(branches.to_json(orient="records"))
            if not cur.empty:
                self.figure(plots.proxy_branches(cur, runs), "proxy_branches.png", "parents and branches")
        times = proxy.step_times(runs)
        if not times.empty:
            self.add("### Step time with and without the twin", "", md_table(times), "")

    # -- block-size study ------------------------------------------------------------------------
    # BLOCK-SIZE SECTION HOOK. The study (analysis/blocksize/, owned by its author) writes a run record
    # whose summary.json has "kind": "block_size_study", "table" (the grid table's file name), "tables"
    # ({name: [file names]}), "figures" ([file names]) and headline numbers. If analysis.blocksize
    # defines ``report_section(run_dir, summary, out_dir) -> list[str]`` (Markdown lines, links
    # relative to out_dir), it is used; otherwise the generic rendering below shows the headline
    # numbers, the small tables and every figure of the record.
    def blocksize_section(self) -> None:
        records = [r for s in self.sweeps for r in study_records(s, BLOCKSIZE_KIND)]
        if not records:
            return
        self.add("## Block-size study: is finer better?", "")
        if importlib.util.find_spec("analysis.blocksize") is None:
            self.add("A block-size study record is here, but analysis.blocksize is not available.", "")
            return
        from analysis import blocksize

        for run_dir, summary in records:
            rel = os.path.relpath(run_dir, self.out)
            self.add(f"Record `{rel}` (status {summary.get('status')}).", "")
            if hasattr(blocksize, "report_section"):
                try:
                    self.add(*blocksize.report_section(run_dir, summary, self.out), "")
                    continue
                except Exception as e:  # the report never fails on one section
                    self.add(f"(blocksize.report_section failed: {type(e).__name__}: {e}; generic view)", "")
            self.add(*_generic_study(run_dir, summary, self.out), "")
        self.fits["block_size_study"] = [
            {k: v for k, v in s.items() if k not in ("versions", "git", "timings")} for _, s in records
        ]


def _generic_study(run_dir: Path, summary: dict[str, Any], out: Path, max_rows: int = 40) -> list[str]:
    lines: list[str] = []
    skip = {"status", "kind", "table", "tables", "figures", "wall_time", "torch_threads"}
    heads = {
        k: v for k, v in summary.items() if k not in skip and isinstance(v, int | float) and v is not None
    }
    if heads:
        lines += [md_table(pd.DataFrame([{"quantity": k, "value": v} for k, v in heads.items()])), ""]
    tables = summary.get("tables") or ({"table": [summary["table"]]} if summary.get("table") else {})
    for name, files in tables.items():
        files = [files] if isinstance(files, str) else list(files)
        path = next((run_dir / f for f in files if (run_dir / f).exists()), None)
        if path is None:
            continue
        try:
            t = pd.read_parquet(path) if path.suffix == ".parquet" else pd.read_csv(path)
        except Exception as e:  # a study table we cannot read is reported, not fatal
            lines += [f"Table `{name}`: unreadable ({type(e).__name__}).", ""]
            continue
        link = os.path.relpath(path, out)
        if len(t) <= max_rows:
            lines += [f"**{name}** ([{path.name}]({link}))", "", md_table(t), ""]
        else:
            lines += [f"**{name}**: {len(t)} rows in [{path.name}]({link}).", ""]
    for fig in summary.get("figures") or []:
        p = run_dir / fig
        if p.exists():
            lines += [f"![{Path(fig).stem}]({os.path.relpath(p, out)})", ""]
    return lines


def write_report(
    sweep_dir: str | Path | Sequence[str | Path],
    out: str | Path | None = None,
    *,
    loss: str = "final_val_loss",
    bootstrap: int = 100,
    seed: int = 0,
    log: Callable[[str], Any] = print,
) -> Path:
    """Write report.md, results.parquet/.csv, curves.parquet, fits.json and figures/ for the sweep in
    ``sweep_dir`` into ``out`` (default: the sweep directory). Several sweep directories make one
    report over all their runs (each run named ``<sweep>/<run>``; ``out`` is then required), e.g. an
    LM grid and its seeds launched as two sweeps. Returns the report's path."""
    sweeps = [Path(sweep_dir)] if isinstance(sweep_dir, str | Path) else [Path(s) for s in sweep_dir]
    if not sweeps:
        raise ValueError("write_report needs at least one sweep directory")
    if len(sweeps) > 1 and out is None:
        raise ValueError("a report over several sweeps needs --out (it belongs to none of them)")
    out_dir = Path(out) if out is not None else sweeps[0]
    out_dir.mkdir(parents=True, exist_ok=True)
    r = _Report(sweeps, out_dir, loss, bootstrap, seed, log)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", RecordWarning)
        frames, curve_frames = [], []
        for s in sweeps:
            d = collect(s)
            c = curves(s, d) if not d.empty else pd.DataFrame()
            if len(sweeps) > 1:  # run ids are relative to their sweep: keep them apart
                d = d.assign(run=s.name + "/" + d["run"].astype(str), sweep_dir=str(s))
                c = c.assign(run=s.name + "/" + c["run"].astype(str)) if not c.empty else c
            frames.append(d)
            curve_frames.append(c)
        df = _concat(frames) if len(frames) > 1 else frames[0]
        cur = _concat(curve_frames)
    skipped = [str(w.message) for w in caught if issubclass(w.category, RecordWarning)]
    for w in caught:
        if not issubclass(w.category, RecordWarning):
            warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
    r.add(
        f"# Sweep report: {', '.join(f'`{s}`' for s in sweeps)}",
        "",
        f"Generated {dt.datetime.now().isoformat(timespec='seconds')} · {len(df)} run record(s) · "
        f"loss `{loss}`.",
        "",
    )
    export(df, out_dir / "results")
    if not cur.empty:
        parquet_safe(cur).to_parquet(out_dir / "curves.parquet", index=False)
    if df.empty:
        r.add("No training run records found (directories with summary.json or config.yaml).", "")
    else:
        if loss not in df:
            df[loss] = np.nan
        r.precision_law_section(df)
        r.delta_section(df)
        r.runs_section(df)
        r.fits_section(df)
        r.isoflop_section(df)
        r.instability_section(df, cur)
        r.proxy_section(df, cur)
    r.blocksize_section()
    if skipped:
        r.add("## Skipped records", "", *[f"- {s}" for s in skipped], "")
    r.add(
        "## Files",
        "",
        "`results.parquet` / `results.csv` (one row per run), `curves.parquet` (metrics.jsonl rows), "
        "`fits.json` (every fitted number), `figures/`.",
        "",
    )
    r.fits["n_runs"] = len(df)
    r.fits["skipped_records"] = skipped
    (out_dir / "fits.json").write_text(json.dumps(_finite(r.fits), indent=2, default=_json_default) + "\n")
    path = out_dir / "report.md"
    path.write_text("\n".join(r.lines))
    return path


def _concat(frames: list[pd.DataFrame]) -> pd.DataFrame:
    """The non-empty frames one after another (an empty frame when none has rows)."""
    full = [f for f in frames if not f.empty]
    return pd.concat(full, ignore_index=True) if full else pd.DataFrame()


def _finite(x: Any) -> Any:
    """NaN/inf → None, recursively (fits.json stays strict JSON)."""
    if isinstance(x, dict):
        return {str(k): _finite(v) for k, v in x.items()}
    if isinstance(x, list | tuple):
        return [_finite(v) for v in x]
    if isinstance(x, float | np.floating):
        return float(x) if math.isfinite(x) else None
    return x


def _json_default(x: Any) -> Any:
    if isinstance(x, np.integer | np.bool_):
        return x.item()
    if isinstance(x, np.floating):
        return None if not np.isfinite(x) else float(x)
    if isinstance(x, tuple | set):
        return list(x)
    return str(x)
