"""analysis.proxy's verdicts on synthetic run frames, and docs/results.md generated end to end from real
(tiny) records of the presets that feed it."""

from __future__ import annotations

import json
import math
import shutil

import launching
import numpy as np
import pandas as pd
import pytest

from analysis import proxy


def _run(run, label, seed, *, final, twin=None, status="done", spike=None, recovered=None, parent=None, **kw):
    return {
        "run": run,
        "path": f"/sweeps/x/{run}",
        "task": "proxy",
        "sweep.precision": label,
        "precision": "fp8_e4m3/fp8_e4m3",
        "norm_affine": kw.pop("norm_affine", "fp8_e4m3"),
        "train.seed": seed,
        "train.branch_from": None if parent is None else f"/elsewhere/{parent}",
        "train.branch_step": kw.pop("branch_step", None),
        "status": status,
        "final_val_loss": final,
        "spike_step": spike,
        "recovered": recovered,
        "twin": twin is not None,
        "twin_final_val_loss": twin,
        "twin_diverged_step": kw.pop("twin_diverged", None),
        "twin_spike_step": None,
        "twin_recovered": None,
        **kw,
    }


def _rows() -> list[dict]:
    return [
        _run("ln_s0", "mx_ln", 0, final=0.09, twin=0.03, spike=300, recovered=False),  # 3× its twin
        _run("ln_s1", "mx_ln", 1, final=math.nan, twin=0.03, status="diverged", spike=None),
        _run("ln_s2", "mx_ln", 2, final=0.04, twin=0.03, twin_diverged=900),  # fine, but its twin diverged
        _run("none_s0", "mx_none", 0, final=0.031, twin=0.03, norm_affine="none", spike=500, recovered=True),
        _run("b_s0", "mx_ln→no_mx@200", 0, final=0.032, parent="ln_s0", branch_step=200),
        _run("b2_s0", "mx_ln→bf16_acts@200", 0, final=0.07, parent="ln_s0", branch_step=200),
    ]


@pytest.fixture
def runs() -> pd.DataFrame:
    return proxy.proxy_runs(pd.DataFrame(_rows()))


def test_verdicts_against_the_twin(runs):
    r = runs.set_index("run")
    assert r.loc["ln_s0", "ratio"] == pytest.approx(3.0)
    assert r.loc["ln_s0", "blew_up"] and r.loc["ln_s1", "blew_up"] and not r.loc["ln_s2", "blew_up"]
    assert r.loc["ln_s2", "stable"] and not r.loc["ln_s0", "stable"]
    assert r.loc["none_s0", "stable"]  # a spike that recovered is stable
    assert r.loc["ln_s0", "twin_stable"] == 1 and r.loc["ln_s2", "twin_stable"] == 0
    # a branch has no twin of its own: its reference is its parent's twin
    assert r.loc["b_s0", "parent"] == "ln_s0" and r.loc["b_s0", "reference"] == pytest.approx(0.03)
    assert r.loc["b_s0", "variant"] == "no_mx" and r.loc["b_s0", "stable"]
    assert r.loc["b2_s0", "blew_up"] and np.isnan(r.loc["b_s0", "twin_stable"])


def test_outcome_tables(runs):
    t = proxy.outcomes(runs).set_index("variant")
    assert t.loc["mx_ln", "seeds"] == 3 and t.loc["mx_ln", "blew up"] == 2 and t.loc["mx_ln", "stable"] == 1
    assert t.loc["mx_ln", "twin stable"] == "2/3" and t.loc["mx_none", "stable"] == 1
    assert t.loc["mx_ln", "twin ≥ 2× run"] == 0
    assert t.loc["mx_ln", "twin final (median)"] == pytest.approx(0.03)
    b = proxy.branch_outcomes(runs).set_index("intervention")
    assert b.loc["no_mx", "avoided blow-up"] == 1 and b.loc["bf16_acts", "blew up"] == 1
    assert b.loc["no_mx", "parents that blew up"] == 1


def test_the_rules_mirror_counts_twins_that_ended_worse_and_tests_the_sign():
    """The blow-up rule run the other way: a twin that ended ≥ 2× its run's loss counts (a diverged run
    never does); where it fires, results.md sets the blow-ups against it with the exact sign test, and
    says nothing where it never fires."""
    from analysis.results.mechanism import _mirror

    rows = [
        _run("a", "mx", 0, final=0.09, twin=0.03),  # 3× its twin: blew up
        _run("b", "mx", 1, final=0.01, twin=0.03),  # its twin 3× it: the mirror
        _run("c", "mx", 2, final=0.015, twin=0.03),  # exactly 2×: the mirror too (as ≥ 2× is a blow-up)
        _run("d", "mx", 3, final=math.nan, twin=0.03, status="diverged"),
        _run("e", "mx", 4, final=0.03, twin=0.03),
    ]
    runs = proxy.proxy_runs(pd.DataFrame(rows))
    assert list(runs["twin_worse"]) == [False, True, True, False, False]
    assert proxy.outcomes(runs).set_index("variant").loc["mx", "twin ≥ 2× run"] == 2
    text = _mirror(runs)
    # 2 blow-ups against 2 mirrors: P(X ≥ 2 | 4, 1/2) = 11/16
    assert "mx 2 / 2 of 5 (p = 0.69)" in text and "In no precision does MX end the worse side" in text
    # seven blow-ups against none: P(X ≥ 7 | 7, 1/2) = 1/128, beyond the scatter
    more = [_run(f"u{i}", "fwd", i, final=0.09, twin=0.03) for i in range(7)]
    text = _mirror(proxy.proxy_runs(pd.DataFrame([*rows, *more])))
    assert "fwd 7 / 0 of 7 (p = 0.0078)" in text
    assert "beyond the endpoints' scatter (p < 0.05) in fwd;" in text
    assert _mirror(runs[runs["run"].isin(["a", "d", "e"])]) is None


def test_claim_1_1s_own_sweep_sets_its_blow_ups_against_the_mirror(tmp_path):
    """1.1's main sweep gets the same mirror sentence as every re-run of its comparison (it had none)."""
    from analysis.results.common import Source, _Doc
    from analysis.results.proxy_claims import proxy_claims

    (tmp_path / "proxy_mechanism").mkdir()
    (tmp_path / "proxy_mechanism" / "multirun.yaml").write_text("model:\n  width: 256\ntrain:\n  lr: 0.004\n")
    mech = Source(
        "proxy_mechanism", "python launch.py -m experiment=proxy_mechanism", tmp_path / "proxy_mechanism"
    )
    rows = [
        _run("ln_s0", "mx_ln", 0, final=0.09, twin=0.03),
        _run("ln_s1", "mx_ln", 1, final=0.01, twin=0.03),  # its twin ended 3× it
        _run("none_s0", "mx_none", 0, final=0.03, twin=0.03, norm_affine="none"),
        _run("none_s1", "mx_none", 1, final=0.03, twin=0.03, norm_affine="none"),
    ]
    shape = {
        "train.lr": 0.004,
        "train.steps": 2000,
        "model.width": 256,
        "model.depth": 4,
        "train.batch_size": 256,
    }
    mech.df = pd.DataFrame([{**r, **shape} for r in rows])
    mech.__dict__["runs"] = proxy.proxy_runs(mech.df)
    doc = _Doc(tmp_path / "results.md")
    proxy_claims(doc, mech, [], Source("none", "", tmp_path / "none"), [])
    text = "\n".join(doc.lines)
    claim = text[text.index("### 1.1") : text.index("### 1.2")]
    assert "The rule's mirror" in claim and "mx_ln 1 / 1 of 2 (p = 0.75)" in claim


def test_branch_points_by_the_sweepers_rule():
    """Branches of ln_s0 (first spike at 300, checkpoints every 100) at 0.4 × → step 100 and 0.75 × →
    step 200: each branch gets the fraction that put it there; outcomes are grouped by it."""
    rows = [
        *_rows(),
        _run("b3_s0", "mx_ln→no_mx@100", 0, final=0.031, parent="ln_s0", branch_step=100),
        _run("b4_s0", "mx_ln→no_mx@150", 0, final=0.031, parent="ln_s0", branch_step=150),
    ]
    runs = proxy.proxy_runs(pd.DataFrame(rows).assign(**{"train.ckpt_every": 100}))
    both = proxy.with_branch_points(runs, [0.75, 0.4]).set_index("run")
    assert both.loc["b_s0", "branch_at"] == 0.75 and both.loc["b3_s0", "branch_at"] == 0.4
    assert np.isnan(both.loc["b4_s0", "branch_at"]) and np.isnan(both.loc["ln_s0", "branch_at"])
    b = proxy.branch_outcomes(both.reset_index())
    assert list(zip(b["branch at (× spike step)"], b["intervention"], strict=True))[:3] == [
        (0.4, "no_mx"),
        (0.75, "no_mx"),
        (0.75, "bf16_acts"),
    ]
    assert (
        "branch_at" in proxy.with_branch_points(runs, None)
        and proxy.with_branch_points(runs, [])["branch_at"].isna().all()
    )


def test_branch_fraction_is_the_inverse_of_spike_branch_step():
    from records import branch_fraction, spike_branch_step

    for spike in (300, 346, 996, 1615):
        for f in (0.4, 0.75):
            k = spike_branch_step({"spike_step": spike}, f, 100)
            if k is not None:
                assert branch_fraction({"spike_step": spike}, k, 100, [0.75, 0.4]) in (0.4, 0.75)
    assert branch_fraction({"spike_step": 300}, 100, 100, [0.4, 0.75]) == 0.4
    assert branch_fraction({"diverged_step": 300}, 200, 100, [0.4, 0.75]) == 0.75
    assert branch_fraction({"spike_step": 300}, 150, 100, [0.4, 0.75]) is None
    assert branch_fraction(None, 100, 100, [0.4]) is None


def test_onset_and_the_mechanism_window():
    steps = np.arange(10, 1001, 10)
    loss = np.where(steps < 600, 0.05 - steps * 1e-5, 1.0)  # jumps at 600
    clip = np.where(steps < 600, 0.9, 0.1)
    cos = np.where(steps <= 100, 0.9, 0.5)
    cur = pd.DataFrame({"run": "ln_s0", "step": steps, "loss": loss, "clip_ln/a": clip, "twin_cos": cos})
    assert proxy.onset(cur, fallback=700) == 600
    flat = cur.assign(loss=0.05)
    assert proxy.onset(flat, fallback=700) == 700
    runs = proxy.proxy_runs(pd.DataFrame([_run("ln_s0", "mx_ln", 0, final=1.0, twin=0.03, spike=650)]))
    m = proxy.mechanism(runs, cur).iloc[0]
    assert m["onset"] == 600 and m["clip_before"] == pytest.approx(0.9)
    assert m["cos_early"] == pytest.approx(0.9) and m["cos_before"] == pytest.approx(0.5)


def test_results_document_from_real_records(tmp_path):
    """The presets' tiny runs → records → docs/results.md: every claim has a verdict that follows its
    rule from the records, a command, and the figures exist."""
    from analysis.collect import collect
    from analysis.results import summary, write_results

    root = tmp_path / "outputs"
    tiny = [
        "train.batch_size=8",
        "train.eval_every=4",
        "train.eval_batches=1",
        "model.width=16",
        "logger=disabled",
    ]
    r = launching.launch(
        "-m", "experiment=proxy_mechanism", f"hydra.sweep.dir={root / 'sweeps' / 'proxy_mechanism'}",
        "sweep.progress=false", "sweep.seeds=[0]", "train.steps=8", "train.ckpt_every=2",
        "train.spike_window=2", "train.spike_threshold=1e-9", *tiny,
        # two of the five interventions at one branch point: the document's code paths, a third of the runs
        "sweep.branch_at=[0.5]", "sweep.branches=[{name:no_mx,w:fp32,a:fp32,norm_affine:none},"
        "{name:no_ln_quant,norm_affine:none}]",
    )  # fmt: skip
    assert r.returncode == 0, r.stderr[-2000:]
    r = launching.launch(
        "-m", "experiment=proxy_late_drift", f"hydra.sweep.dir={root / 'sweeps' / 'proxy_late_drift'}",
        "sweep.progress=false", "sweep.seeds=[0]", "train.steps=8", "train.ckpt_every=4", *tiny,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr[-2000:]
    r = launching.launch(
        "experiment=block_size_study", f"out_dir={root / 'studies' / 'block_size_study'}",
        "study.weights=false", "study.sigmas=[0.005,0.01,0.05]", "study.block_sizes=[8,16]",
        "study.n_samples=4096", "logger=disabled",
    )  # fmt: skip
    assert r.returncode == 0, r.stderr[-2000:]
    out = write_results(root, tmp_path / "docs" / "results.md")
    verdicts = summary(out)
    text = out.read_text()
    assert len(verdicts) == 32 and set(verdicts.values()) <= {
        "reproduced", "partially reproduced", "not reproduced", "not run here", "measured"
    }  # fmt: skip
    runs = proxy.proxy_runs(collect(root / "sweeps" / "proxy_mechanism"))
    ln = runs[runs["parent"].isna() & runs["norm_affine"].ne("none")]
    assert f"**{int(ln['blew_up'].sum())} of {len(ln)} seeds blew up**" in text
    lm_claims = ("1.5", "1.6", *(f"3.{i}" for i in range(1, 24)))  # 3.1–3.23
    lm = [v for t, v in verdicts.items() if t.startswith(lm_claims)]
    assert lm == ["not run here"] * 25  # no LM sweep in this root
    assert "python launch.py -m experiment=proxy_mechanism" in text
    # the late search: each sweep's per-seed line, its command, and the presets not run yet
    assert "`proxy_late_drift` (16 × 4, 8, lr 0.004 (×0.5), 8 steps): blow-up onset at" in text
    assert "per seed: seed 0 " in text and "`python launch.py -m experiment=proxy_late_drift`" in text
    assert "Planned but not run yet: `experiment=proxy_late_search`, `experiment=proxy_late_lr`" in text
    for name in ("proxy_mechanism.png", "blocksize_sigma.png"):
        assert (tmp_path / "docs" / "figures" / name).stat().st_size > 10_000
    if runs["parent"].notna().any():
        assert (tmp_path / "docs" / "figures" / "proxy_branches.png").exists()
    # a fresh checkout has the archives, not the records: the same document comes back from them
    archived = sorted(p.name for p in (tmp_path / "docs" / "records").iterdir())
    assert archived == ["block_size_study.tar.xz", "proxy_late_drift.tar.xz", "proxy_mechanism.tar.xz"]
    shutil.rmtree(root)
    again = write_results(root, tmp_path / "docs" / "results.md")
    assert again.read_text() == text and (root / "sweeps" / "proxy_mechanism").is_dir()


def test_unfinished_branches_have_no_outcome():
    rows = [*_rows(), _run("b5_s0", "mx_ln→fwd_only@200", 0, final=math.nan, parent="ln_s0", branch_step=200,
                           status="interrupted")]  # fmt: skip
    b = proxy.branch_outcomes(proxy.proxy_runs(pd.DataFrame(rows)))
    assert "fwd_only" not in set(b["intervention"]) and b["branches"].sum() == 2


def test_the_mechanism_rule_and_its_run_at_another_learning_rate(tmp_path):
    """1.1's rule: ≥ 2/3 of the γ-in-E4M3 seeds blew up with every twin and every γ-unquantized run
    stable → reproduced; more often than both → partially. The edge block applies it to another sweep's
    finished runs only (a running one has no outcome) and names the sweep's LR."""
    from analysis.results.common import PARTIAL, REPRODUCED, Source, _Doc
    from analysis.results.mechanism import _edge_block, _mechanism_verdict

    rows = [
        _run("ln_s0", "mx_ln", 0, final=0.09, twin=0.03),
        _run("ln_s1", "mx_ln", 1, final=math.nan, twin=0.03, status="diverged"),
        _run("ln_s2", "mx_ln", 2, final=0.03, twin=0.03),
        *[_run(f"none_s{s}", "mx_none", s, final=0.03, twin=0.03, norm_affine="none") for s in range(3)],
    ]
    frame = proxy.proxy_runs(pd.DataFrame(rows))
    v = _mechanism_verdict(frame)
    assert (v.verdict, v.k, v.n) == (REPRODUCED, 2, 3) and "**2 of 3 seeds blew up**" in v.sentence
    rows[2]["twin_diverged_step"] = 500  # one twin unstable: no longer "every twin stable"
    assert _mechanism_verdict(proxy.proxy_runs(pd.DataFrame(rows))).verdict == PARTIAL
    rows[3]["final_val_loss"] = 0.09  # γ unquantized blew up once: still less often than γ in E4M3
    assert _mechanism_verdict(proxy.proxy_runs(pd.DataFrame(rows))).verdict == PARTIAL

    path = tmp_path / "proxy_mechanism_lr3"
    path.mkdir()
    (path / "multirun.yaml").write_text("train:\n  lr: 0.003\n")
    edge = [
        _run("ln_s0", "mx_ln", 0, final=0.09, twin=0.03),
        _run("ln_s1", "mx_ln", 1, final=math.nan, twin=0.03, status="diverged"),
        _run("ln_s2", "mx_ln", 2, final=0.036, twin=0.03),
        _run("ln_s3", "mx_ln", 3, final=math.nan, twin=None, status="running"),
        *[_run(f"none_s{s}", "mx_none", s, final=0.03, twin=0.03, norm_affine="none") for s in range(3)],
    ]
    src = Source("proxy_mechanism_lr3", "python launch.py -m experiment=proxy_mechanism_lr3", path)
    src.__dict__["runs"] = proxy.proxy_runs(pd.DataFrame(edge))
    doc = _Doc(tmp_path / "results.md")
    _edge_block(doc, [src])
    text = "\n".join(doc.lines)
    assert "1 run(s) not finished yet" in text and "**The same comparison at lr 0.003, seeds 0–2**" in text
    assert "**2 of 3 seeds blew up**" in text and "3 of 3 stable" in text
    assert "this setting is **reproduced**" in text
    # the finite pairs (seeds 0 and 2): 3× and 1.2× the twin against 1× unquantized
    assert "higher in 2 of 2 seeds (median 2.1 against 1;" in text
    assert "Pooled" not in text  # no first sweep at this LR to pool with

    # fresh seeds at the first sweep's LR: a replication, pooled with it
    first = tmp_path / "proxy_mechanism"
    first.mkdir()
    (first / "multirun.yaml").write_text("train:\n  lr: 0.003\n")
    mech = Source("proxy_mechanism", "python launch.py -m experiment=proxy_mechanism", first)
    mech.df = pd.DataFrame(rows)  # ran
    mech.__dict__["runs"] = proxy.proxy_runs(pd.DataFrame(rows))  # seeds 0–2: 2 of 3 γ-in-E4M3 blew up
    doc = _Doc(tmp_path / "results.md")
    _edge_block(doc, [src], mech)
    text = "\n".join(doc.lines)
    assert "Fresh seeds at the same setting" in text
    pooled = "Pooled with `proxy_mechanism`'s seeds 0–2 (6 seeds): γ/β in E4M3: **4 of 6 seeds blew up**"
    assert pooled in text

    # nothing with γ in E4M3 finished yet: only the line saying so
    src.__dict__["runs"] = proxy.proxy_runs(pd.DataFrame([edge[3], *edge[4:]]))
    doc = _Doc(tmp_path / "results.md")
    _edge_block(doc, [src], mech)
    assert doc.lines == [f"`{src.name}`: 1 run(s) not finished yet; counts below are the finished.", ""]


def test_the_rate_interval_is_clopper_pearson():
    """Where a blow-up rate seen as k of n can lie: the exact binomial interval (8 of 16 cannot tell
    1/2 from 1.1's 2/3; 15 of 32 can), and all of [0, 1] when nothing ran."""
    lo, hi = proxy.rate_interval(8, 16)
    assert (round(lo, 4), round(hi, 4)) == (0.2465, 0.7535)
    assert proxy.rate_interval(15, 32)[1] < 2 / 3 < proxy.rate_interval(16, 32)[1]
    assert proxy.rate_interval(0, 0) == (0.0, 1.0)


def test_fresh_seed_replications_pool_with_every_sweep_before_them(tmp_path):
    """Two fresh-seed sweeps at the first sweep's setting: the second's pooled line counts all three
    sweeps' seeds (not the first's and its own only), says where γ in E4M3's rate can lie against the
    rule's 2/3, and gives the rule's mirror over the pool."""
    from analysis.results.common import Source, _Doc
    from analysis.results.mechanism import _edge_block

    def sweep(name, seeds, blown, worse=()):
        path = tmp_path / name
        path.mkdir()
        (path / "multirun.yaml").write_text("train:\n  lr: 0.004\n")
        rows = []
        for s in seeds:
            final = 0.09 if s in blown else 0.01 if s in worse else 0.03  # 3×, 1/3× or 1× the twin
            rows += [
                _run(f"ln_s{s}", "mx_ln", s, final=final, twin=0.03),
                _run(f"none_s{s}", "mx_none", s, final=0.03, twin=0.03, norm_affine="none"),
            ]
        src = Source(name, f"python launch.py -m experiment={name}", path)
        src.df = pd.DataFrame(rows)  # ran
        src.__dict__["runs"] = proxy.proxy_runs(pd.DataFrame(rows))
        return src

    mech = sweep("proxy_mechanism", range(4), blown={0, 1}, worse={3})
    edges = [
        sweep("proxy_mechanism_seeds", range(4, 8), {4, 5}),
        sweep("proxy_mechanism_seeds16", range(8, 16), {8, 9, 10, 11}),
    ]
    doc = _Doc(tmp_path / "results.md")
    _edge_block(doc, edges, mech)
    text = "\n".join(doc.lines)
    first = "Pooled with `proxy_mechanism`'s seeds 0–3 (8 seeds)"
    assert f"{first}: γ/β in E4M3: **4 of 8 seeds blew up**" in text
    both = "Pooled with `proxy_mechanism`'s seeds 0–3 and `proxy_mechanism_seeds`'s seeds 4–7 (16 seeds)"
    assert f"{both}: γ/β in E4M3: **8 of 16 seeds blew up**" in text
    assert "8/16 = 0.50, 95% Clopper-Pearson interval 0.25–0.75, which holds the rule's 2/3" in text
    assert "Pooled, the rule's mirror:" in text and "mx_ln 8 / 1 of 16 (p = 0.02)" in text
    # enough seeds and too few blow-ups: the rule's 2/3 is excluded
    edges.append(sweep("proxy_mechanism_seeds32", range(16, 48), set()))
    doc = _Doc(tmp_path / "results.md")
    _edge_block(doc, edges, mech)
    assert "**8 of 48 seeds blew up**" in "\n".join(doc.lines)
    assert "which ends below the rule's 2/3: its rate is excluded at this setting" in "\n".join(doc.lines)


def test_the_interventions_rule_and_a_rerun_with_branches(tmp_path):
    """1.3's rule is judged at the earliest branch point, on branches of parents that blew up: every
    paper-named intervention avoiding it in ≥ 2/3 → reproduced, some → partially. A re-run sweep with
    branches (another width) gets the same rule, its setting named, beside the main one."""
    from analysis.results.common import NOT, NOT_RUN, PARTIAL, REPRODUCED, Source, _Doc, _setting
    from analysis.results.interventions import _intervention_block, _interventions
    from analysis.results.proxy_claims import proxy_claims

    def sweep(name, rows, yaml, points=(0.5,)):
        path = tmp_path / name
        path.mkdir()
        (path / "multirun.yaml").write_text(yaml)
        src = Source(name, f"python launch.py -m experiment={name}", path)
        shape = {"train.steps": 2000, "model.width": 128, "model.depth": 4, "train.batch_size": 256}
        lr = src.setting("train.lr")  # each run records the LR it trained at: its sweep's here
        src.df = pd.DataFrame([{**r, **shape, "train.lr": lr} for r in rows])
        src.__dict__["runs"] = proxy.with_branch_points(proxy.proxy_runs(src.df), list(points))
        src.__dict__["planned_branches"] = {
            r["run"]: r["sweep.precision"].split("→")[0] for r in rows if r["train.branch_from"] is not None
        }
        return src

    parents = [
        _run("ln_s0", "mx_ln", 0, final=0.09, twin=0.03, spike=400, recovered=False),
        _run("ln_s1", "mx_ln", 1, final=math.nan, twin=0.03, status="diverged", spike=300),
        _run("none_s0", "mx_none", 0, final=0.03, twin=0.03, norm_affine="none"),
        _run("ln_s2", "mx_ln", 2, final=0.08, twin=0.03, spike=200, recovered=False),
    ]

    def branches(ok: dict[str, int]):  # per intervention: how many of the three parents it rescues
        return [
            _run(f"{v}_s{s}", f"mx_ln→{v}@100", s, final=0.031 if s < ok[v] else 0.2, parent=f"ln_s{s}",
                 branch_step=200 if s == 0 else 100, spike=None if s < ok[v] else 410 - 100 * s)
            for v in ("no_ln_quant", "bf16_acts", "fwd_only", "no_mx") for s in (0, 1, 2)
        ]  # fmt: skip

    # a γ-unquantized parent that blew up is branched too; no LN quantization changes nothing there
    parents.append(_run("none_s1", "mx_none", 1, final=0.3, twin=0.03, norm_affine="none", spike=500))
    unquantized = [_run(f"n{v}_s1", f"mx_none→{v}@100", 1, final=0.3, parent="none_s1", branch_step=200,
                        norm_affine="none") for v in ("no_ln_quant", "bf16_acts", "fwd_only")]  # fmt: skip
    mech = sweep("proxy_mechanism", [*parents, *unquantized, *branches(dict.fromkeys(
        ("no_ln_quant", "bf16_acts", "fwd_only", "no_mx"), 3))],
        "model:\n  width: 256\ntrain:\n  lr: 0.004\nsweep:\n  branch_at: [0.5]\n")  # fmt: skip
    result = _interventions(mech)
    assert result.verdict == REPRODUCED and set(result.hot["parent"]) == {"ln_s0", "ln_s1", "ln_s2"}
    assert result.table.set_index("intervention").loc["no_ln_quant", "branches"] == 3
    # every intervention rescues the one parent that blew up: one run is not a rate of ≥ 2/3
    rescued = [b for b in branches(dict.fromkeys(("no_ln_quant", "bf16_acts", "fwd_only", "no_mx"), 3))
               if b["train.branch_from"].endswith("/ln_s0")]  # fmt: skip
    one = sweep("one", [parents[0], parents[2], *rescued], "train:\n  lr: 0.004\n")
    assert _interventions(one).verdict == PARTIAL and _interventions(one).parents == 1
    doc = _Doc(tmp_path / "docs" / "one.md")
    _intervention_block(doc, one, _interventions(one), "one.png")
    assert "Only 1 parent blew up: too few for 1.3's rate (≥ 2/3 of the branches of at least 3)" in "\n".join(
        doc.lines)  # fmt: skip
    half = {"no_ln_quant": 3, "bf16_acts": 1, "fwd_only": 0, "no_mx": 3}
    d128 = sweep("proxy_mechanism_d128", [*parents, *branches(half)],
                 "model:\n  width: 128\ntrain:\n  lr: 0.008\nsweep:\n  branch_at: [0.5]\n")  # fmt: skip
    assert _interventions(d128).verdict == PARTIAL
    none = {"no_ln_quant": 0, "bf16_acts": 1, "fwd_only": 1, "no_mx": 3}  # 1 of 3 < 2/3 each
    assert _interventions(sweep("x", [*parents, *branches(none)], "train:\n  lr: 0.004\n")).verdict == NOT
    assert _interventions(sweep("y", parents, "train:\n  lr: 0.004\n")).verdict == NOT_RUN
    some = [b for b in branches({**none, "no_ln_quant": 3}) if b["run"].startswith("no_")]
    assert _interventions(sweep("w", [*parents, *some], "train:\n  lr: 0.004\n")).verdict == PARTIAL

    empty = Source("none", "", tmp_path / "none")
    doc = _Doc(tmp_path / "docs" / "results.md")
    fixed = "model:\n  width: 128\ntrain:\n  lr: 0.008\nsweep:\n  branch_step: 50\n"
    early = sweep("proxy_mechanism_d128_early", [*parents[:2], parents[3], *branches(none)], fixed, points=())
    proxy_claims(doc, mech, [], empty, [d128], [d128, early])
    text = "\n".join(doc.lines)
    early_cited = "(branched at step 50), `python launch.py -m experiment=proxy_mechanism_d128_early` (rec"
    assert early_cited in text
    picked = sweep("picked", [parents[0], {**parents[1], "train.seed": 3}], fixed, points=())
    assert _setting(picked, mech) == "width 128, lr 0.008, seeds 0, 3"  # not a range: each seed
    assert text.count("by 1.3's rule this setting is **not reproduced**.") == 1
    assert "had not finished" not in text  # the γ-unquantized parent's planned branches are not 1.3's

    assert "### 1.3 Interventions from a checkpoint before the spike\n\n**Reproduced.**" in text
    d128_cited = "(branch point 0.5 × the spike step), `python launch.py -m "
    assert f"**The same interventions at width 128, lr 0.008, seeds 0–2** {d128_cited}" in text
    assert "by 1.3's rule this setting is **partially reproduced**." in text
    assert "**The same comparison at width 128, lr 0.008, seeds 0–2**" in text  # 1.1 beside it

    # where fp32 itself no longer rescues, each parent's spike step beside its fp32 branch's
    lost = dict.fromkeys(("no_ln_quant", "bf16_acts", "fwd_only", "no_mx"), 0)
    hopeless = sweep("z", [*parents, *branches(lost)], "train:\n  lr: 0.004\n")
    doc = _Doc(tmp_path / "docs" / "z.md")
    _intervention_block(doc, hopeless, _interventions(hopeless), "z.png")
    text = "\n".join(doc.lines)
    assert "even switching everything to fp32 (`no_mx`) avoided the blow-up in only 0 of 3 branches" in text
    assert "First spike of each parent → of its fp32 branch: 400 → 410, 300 → 310, 200 → 210." in text

    # fp32 branches that end under the line but still spike at their parent's step are named
    rescued = branches(dict.fromkeys(("no_ln_quant", "bf16_acts", "fwd_only", "no_mx"), 3))
    met = [{**b, "spike_step": 395, "recovered": True} if b["run"] == "no_mx_s0" else b for b in rescued]
    late = sweep("m", [*parents, *met], "train:\n  lr: 0.004\n")
    doc = _Doc(tmp_path / "docs" / "m.md")
    _intervention_block(doc, late, _interventions(late), "m.png")
    text = "\n".join(doc.lines)
    assert "avoided the blow-up in 3 of 3 branches" in text
    assert "Of those, 1 still spiked (first spike of each parent → of its fp32 branch: 400 → 395)" in text

    # a branch that changed only Adam's betas is set against fp32 on the same parents
    beta = [{**b, "run": b["run"].replace("no_ln_quant", "adam_b2_95"), "train.betas": "[0.9, 0.95]",
             "sweep.precision": b["sweep.precision"].replace("no_ln_quant", "adam_b2_95")}
            for b in rescued if b["run"].startswith("no_ln_quant")]  # fmt: skip
    opt = sweep("o", [*parents, *rescued, *beta], "train:\n  lr: 0.004\n")
    doc = _Doc(tmp_path / "docs" / "o.md")
    _intervention_block(doc, opt, _interventions(opt), "o.png")
    text = "\n".join(doc.lines)
    assert "`adam_b2_95` changed only Adam's betas to [0.9, 0.95] at the branch point" in text
    assert "Adam's moments stay the parent's. None of its 3 branches spiked." in text
    jolted = [
        {**b, "spike_step": b["train.branch_step"] + 10 + b["train.seed"], "recovered": True} for b in beta
    ]
    opt = sweep("j", [*parents, *rescued, *jolted], "train:\n  lr: 0.004\n")
    doc = _Doc(tmp_path / "docs" / "j.md")
    _intervention_block(doc, opt, _interventions(opt), "j.png")
    jolt = (
        "3 of its 3 branches spiked 10–12 steps after the branch point (median 11), and 3 of those recovered."
    )
    assert jolt in "\n".join(doc.lines)
    assert "| 3 | 3 | 3 | 0 | 0 | 1 |" in text  # 3 parents, each rescued by both: none discordant, p = 1


@pytest.mark.parametrize(
    ("field", "column", "default", "other"),
    [("model.teacher", "teacher", "residual", "released"), ("model.activation", "φ", "gelu", "swiglu")],
)
def test_the_search_log_tells_settings_apart(tmp_path, field, column, default, other):
    """A row per setting, the teacher and the activation included: a record from before the field
    existed ran the default (the residual teacher, GeLU), and a run with another value at the same
    shape and LR is another row, named in its column."""
    from analysis.results.common import Source, _source_search_rows

    shape = {"model.width": 16, "model.depth": 2, "train.batch_size": 8, "train.lr": 1e-3, "train.steps": 10}
    rows = [
        _run("old_s0", "mx_ln", 0, final=0.03, twin=0.03, **shape),
        _run("new_s0", "mx_ln", 0, final=0.09, twin=0.03, **shape, **{field: other}),
        _run("new_s1", "mx_ln", 1, final=0.01, twin=0.03, **shape, **{field: other}),  # the twin 3× it
    ]
    rows[0].pop(field, None)
    src = Source("proxy_released_search", "python launch.py -m experiment=proxy_released_search", tmp_path)
    src.__dict__["runs"] = proxy.proxy_runs(pd.DataFrame(rows))
    got = {r[column]: (r["seeds"], r["blew up"], r["twin ≥ 2× run"]) for r in _source_search_rows(src)}
    assert got == {default: (1, 0, 0), other: (2, 1, 1)}


def test_a_rerun_on_fresh_seeds_of_a_pilots_setting_is_pre_registered(tmp_path):
    """A re-run whose setting a pilot sweep chose (results.PILOT) says so, names the setting (teacher
    included), and is a pre-registered test only when none of its seeds were in the pilot."""
    from analysis.results.common import Source, _Doc
    from analysis.results.mechanism import _edge_block

    def source(name, rows, lr, teacher=None):
        (tmp_path / name).mkdir()
        model = f"model:\n  teacher: {teacher}\n" if teacher else ""
        (tmp_path / name / "multirun.yaml").write_text(f"train:\n  lr: {lr}\n{model}")
        src = Source(name, f"python launch.py -m experiment={name}", tmp_path / name)
        src.df = pd.DataFrame(rows)
        src.__dict__["runs"] = proxy.proxy_runs(src.df)
        return src

    def pair(seed):
        return [
            _run(f"ln_s{seed}", "mx_ln", seed, final=0.09, twin=0.03),
            _run(f"none_s{seed}", "mx_none", seed, final=0.03, twin=0.03, norm_affine="none"),
        ]

    mech = source("proxy_mechanism", pair(0), 0.004)
    pilot = source("proxy_released_search", pair(0) + pair(1), 0.008, "released")
    fresh = source("proxy_released", pair(2) + pair(3), 0.008, "released")
    doc = _Doc(tmp_path / "results.md")
    _edge_block(doc, [fresh], mech, {"proxy_released": pilot})
    text = "\n".join(doc.lines)
    assert "**The same comparison at teacher released, lr 0.008, seeds 2–3**" in text
    assert "chosen on `proxy_released_search`'s seeds 0–1 (in the search log); these seeds are fresh" in text
    assert "pre-registered test of that setting" in text and "search result" not in text

    reused = source("proxy_released_again", pair(1) + pair(2), 0.008, "released")
    doc = _Doc(tmp_path / "results.md")
    _edge_block(doc, [reused], mech, {"proxy_released_again": pilot})
    assert "and shares seeds with it, so this is a search result, not a pre-registered test" in "\n".join(
        doc.lines
    )


def _source(tmp_path, name: str, rows: list[dict], multirun: str):
    """A sweep (results.Source) over synthetic run rows, launched with the settings ``multirun``."""
    from analysis.results.common import Source

    (tmp_path / name).mkdir()
    (tmp_path / name / "multirun.yaml").write_text(multirun)
    src = Source(name, f"python launch.py -m experiment={name}", tmp_path / name)
    src.df = pd.DataFrame(rows)
    src.__dict__["runs"] = proxy.proxy_runs(src.df)
    return src


def test_a_one_factor_rerun_is_set_beside_its_base_seed_by_seed(tmp_path):
    """A re-run that changes one setting of another sweep (results.ONE_FACTOR: batch 256 → 1024) names
    the change, and sets each shared seed's outcomes beside the base sweep's, with the counts there →
    here and in how many seeds γ in E4M3 had the same outcome."""
    from analysis.results.common import PARTIAL, _Doc
    from analysis.results.mechanism import _edge_block, _one_factor_scans, _scan

    def source(name, rows, batch):
        return _source(
            tmp_path, name, rows, f"train:\n  lr: 0.008\n  batch_size: {batch}\nmodel:\n  width: 128\n"
        )

    def pair(seed, ln_final, twin=0.03, ln_status="done"):
        return [
            _run(f"ln_s{seed}", "mx_ln", seed, final=ln_final, twin=twin, status=ln_status),
            _run(f"none_s{seed}", "mx_none", seed, final=0.03, twin=0.03, norm_affine="none"),
        ]

    # base: seeds 0 and 1 blew up (3×, diverged), seed 2 stable; seed 3 only there
    base = source(
        "proxy_mechanism_d128",
        [*pair(0, 0.09), *pair(1, math.nan, ln_status="diverged"), *pair(2, 0.03), *pair(3, 0.09)],
        256,
    )
    # here: seed 0 blew up again, seed 1 stable, seed 2 blew up, and seed 2's twin was not stable
    here = source(
        "proxy_mechanism_d128_b1024",
        [*pair(0, 0.12), *pair(1, 0.031), *_run_twin_unstable(2)],
        1024,
    )
    doc = _Doc(tmp_path / "results.md")
    _edge_block(doc, [base, here])
    text = "\n".join(doc.lines)
    assert "One setting of `proxy_mechanism_d128` changed, fixed before it ran" in text
    assert (
        "**Beside `proxy_mechanism_d128`, seed by seed** (batch 256 → 1024, set before it ran; seeds 0–2"
        in text
    )
    assert "γ in E4M3 blew up 2/3 → 2/3, γ unquantized 0/3 → 0/3, fp32 twins not stable 0/3 → 1/3" in text
    assert "in 1 of 3 seeds" in text  # seed 0 blew up in both; seeds 1 and 2 turned around
    header = next(line for line in text.splitlines() if line.startswith("| seed |"))
    assert header.split(" | ")[1:3] == ["γ in E4M3 (`proxy_mechanism_d128`)", "γ in E4M3 (this sweep)"]
    row = next(line for line in text.splitlines() if line.startswith("| 1 |"))
    assert row.split(" | ")[1:3] == ["blew up", "stable"]  # γ in E4M3: base, then this sweep

    # fresh seeds at the base's setting (results.REPLICATION): a replication, no seed-by-seed table
    fresh = source("proxy_mechanism_d128_seeds", [*pair(16, 0.09), *pair(17, 0.03), *pair(18, 0.03)], 256)
    doc = _Doc(tmp_path / "results.md")
    _edge_block(doc, [base, fresh])
    text = "\n".join(doc.lines)
    assert "Fresh seeds at `proxy_mechanism_d128`'s setting: a replication of its rates." in text
    assert "seed by seed" not in text

    # the scan over the batch size at the base's setting (the key the re-run changed): a row per batch
    scans = [(b.name, key) for b, key in _one_factor_scans([base, here])]
    assert scans == [("proxy_mechanism_d128", "train.batch_size")]
    doc = _Doc(tmp_path / "results.md")
    _scan(doc, base, [base, here, fresh], "train.batch_size")
    text = "\n".join(doc.lines)
    assert "**Over the batch size at `proxy_mechanism_d128`'s setting**" in text
    assert f"| 256 | 7 | 4/7 | 0/7 | 0/7 | 0/7 | {PARTIAL} |" in text  # pooled with the fresh seeds
    assert f"| 1024 | 3 | 2/3 | 0/3 | 1/3 | 0/3 | {PARTIAL} |" in text
    assert "Its blow-up rate rises with the batch size (4/7, 2/3)" in text

    # an LR-axis sweep at batch 256 whose runs are all at another LR has no runs in this scan: it is not
    # named among its sweeps (its own batch column once refilled the emptied frame)
    at = {"train.lr": 0.006, "train.batch_size": 256}
    axis = source("proxy_mechanism_d128_lr", [{**r, **at} for r in pair(0, 0.09)], 256)
    doc = _Doc(tmp_path / "results.md")
    _scan(doc, base, [base, here, fresh, axis], "train.batch_size")
    text = "\n".join(doc.lines)
    assert f"| 256 | 7 | 4/7 | 0/7 | 0/7 | 0/7 | {PARTIAL} |" in text
    assert "proxy_mechanism_d128_lr" not in text


def test_adams_betas_tell_one_setting_from_another(tmp_path):
    """A re-run that changes only Adam's betas (results.ONE_FACTOR: proxy_mechanism_d128_beta95) names
    that change, is left out of the base setting's scans (another β2 is another setting: pooling it
    into batch 256 would mix two settings' rates), and its search-log row says β2; a record that left
    the betas null ran the proxy task's default β2 0.999."""
    from analysis.results.common import _Doc, _source_search_rows
    from analysis.results.mechanism import _edge_block, _one_factor_scans, _scan

    def source(name, rows, betas=None):
        extra = f"  betas: {betas}\n" if betas else ""
        return _source(
            tmp_path, name, rows, f"train:\n  lr: 0.008\n  batch_size: 256\n{extra}model:\n  width: 128\n"
        )

    shape = {"model.width": 128, "model.depth": 4, "train.batch_size": 256, "train.lr": 8e-3}
    shape["train.steps"] = 10

    def pair(seed, ln_final, betas=None):
        b = {"train.betas": betas} if betas else {}
        return [
            _run(f"ln_s{seed}", "mx_ln", seed, final=ln_final, twin=0.03, **shape, **b),
            _run(f"none_s{seed}", "mx_none", seed, final=0.03, twin=0.03, norm_affine="none", **shape, **b),
        ]

    base = source("proxy_mechanism_d128", [*pair(0, 0.09), *pair(1, 0.09)])
    b95 = "[0.9, 0.95]"
    beta = source("proxy_mechanism_d128_beta95", [*pair(0, 0.03, b95), *pair(1, 0.03, b95)], [0.9, 0.95])
    doc = _Doc(tmp_path / "results.md")
    _edge_block(doc, [base, beta])
    text = "\n".join(doc.lines)
    assert "(Adam betas [0.9, 0.999] → [0.9, 0.95], set before it ran" in text
    assert "γ in E4M3 blew up 2/2 → 0/2" in text

    doc = _Doc(tmp_path / "results.md")
    _scan(doc, base, [base, beta], "train.batch_size")  # one batch size at β2 0.999: no scan to show
    assert not doc.lines

    # the scan over β2 that the re-run triggers: a row per β2, read from the sweeps' settings
    assert [(b.name, key) for b, key in _one_factor_scans([base, beta])] == [
        ("proxy_mechanism_d128", "train.betas")
    ]
    doc = _Doc(tmp_path / "results.md")
    _scan(doc, base, [base, beta], "train.betas")
    text = "\n".join(doc.lines)
    assert "**Over the Adam β2 at `proxy_mechanism_d128`'s setting**" in text
    rows = [line for line in text.splitlines() if line.startswith("| 0.9")]
    assert [r.split(" | ")[:3] for r in rows] == [["| 0.95", "2", "0/2"], ["| 0.999", "2", "2/2"]]
    assert "Its blow-up rate rises with the β2 (0/2, 2/2)" in text

    # a sweep with an LR axis keeps its base's train.lr in multirun.yaml; its runs at other LRs are
    # other settings, not more seeds at β2 0.999 (they were pooled into that row before)
    other = {**shape, "train.lr": 6e-3}
    axis = source("proxy_mechanism_d128_lr", [
        _run("ln_s2", "mx_ln", 2, final=0.03, twin=0.03, **other),
        _run("none_s2", "mx_none", 2, final=0.03, twin=0.03, norm_affine="none", **other),
    ])  # fmt: skip
    doc = _Doc(tmp_path / "results.md")
    _scan(doc, base, [base, beta, axis], "train.betas")
    rows = [line for line in "\n".join(doc.lines).splitlines() if line.startswith("| 0.9")]
    assert [r.split(" | ")[:3] for r in rows] == [["| 0.95", "2", "0/2"], ["| 0.999", "2", "2/2"]]
    assert "proxy_mechanism_d128_lr" not in "\n".join(doc.lines)  # not named among the scan's sweeps

    rows = _source_search_rows(base) + _source_search_rows(beta)
    assert {(r["sweep"], r["Adam β2"], r["blew up"]) for r in rows if r["precision"] == "mx_ln"} == {
        ("proxy_mechanism_d128", "0.999", 2),
        ("proxy_mechanism_d128_beta95", "0.95", 0),
    }


def _run_twin_unstable(seed):
    return [
        _run(f"ln_s{seed}", "mx_ln", seed, final=0.2, twin=0.03, twin_diverged=700),
        _run(f"none_s{seed}", "mx_none", seed, final=0.03, twin=0.03, norm_affine="none"),
    ]


def test_a_late_search_on_another_teacher_has_no_baseline_onsets(tmp_path):
    """The late search compares each seed's onset with proxy_mechanism's (residual teacher); a sweep on
    the released teacher is another task, so its line names the teacher and gives its own onsets only."""
    from analysis.results.common import Source
    from analysis.results.late import _late_findings

    shape = {"model.width": 16, "model.depth": 2, "train.batch_size": 8, "train.lr": 1e-3, "train.steps": 10}
    rows = [
        _run("a_s0", "mx_ln", 0, final=0.03, twin=0.03, **shape, **{"model.teacher": "released"}),
        _run("a_s1", "mx_ln", 1, final=0.09, twin=0.03, spike=7, **shape, **{"model.teacher": "released"}),
    ]
    src = Source("proxy_released_late", "python launch.py -m experiment=proxy_released_late", tmp_path)
    src.__dict__["runs"] = proxy.proxy_runs(pd.DataFrame(rows))
    steps = range(1, 11)
    src.cur = pd.DataFrame(
        [{"run": "a_s0", "step": t, "loss": 0.03} for t in steps]
        + [{"run": "a_s1", "step": t, "loss": 0.03 if t < 7 else 0.5} for t in steps]
    )
    (line,) = _late_findings(src, baseline={0: 300, 1: 350})
    assert line.startswith("`proxy_released_late` (16 × 2, 8, released teacher, lr 0.001 (×1), 10 steps): ")
    assert "blow-up onset, per seed: seed 0 none; seed 1 7 (1 after half of the run)" in line
    assert "300" not in line and "proxy_mechanism" not in line
    for r in rows:  # the residual teacher: proxy_mechanism's onsets are the baseline
        r["model.teacher"] = "residual"
    src.__dict__["runs"] = proxy.proxy_runs(pd.DataFrame(rows))
    src.__dict__.pop("search_rows", None)
    (line,) = _late_findings(src, baseline={0: 300, 1: 350})
    assert "at proxy_mechanism's setting → here, per seed: seed 0 300 → none; seed 1 350 → 7" in line


def test_late_blowups_name_gamma_the_twin_and_the_control(tmp_path):
    """1.4 counts a late blow-up only with γ in E4M3 and a stable fp32 twin; each row says so, and how
    the same seed fared with γ unquantized (the control)."""
    from analysis.results.common import Source
    from analysis.results.late import _late_blowups

    steps = {"train.steps": 10}
    rows = [
        _run("ln_s0", "mx_ln", 0, final=0.09, twin=0.03, spike=8, **steps),  # late, twin stable
        _run("ln_s1", "mx_ln", 1, final=0.09, twin=0.03, spike=8, twin_diverged=9, **steps),  # twin not
        _run("ln_s2", "mx_ln", 2, final=0.09, twin=0.03, spike=3, **steps),  # early
        _run("none_s0", "mx_none", 0, final=0.031, twin=0.03, norm_affine="none", **steps),
        _run("none_s1", "mx_none", 1, final=0.09, twin=0.03, norm_affine="none", spike=8, **steps),
    ]
    src = Source("proxy_released", "python launch.py -m experiment=proxy_released", tmp_path)
    src.__dict__["runs"] = proxy.proxy_runs(pd.DataFrame(rows))
    jump = {"ln_s0": 8, "ln_s1": 8, "ln_s2": 3, "none_s1": 8}
    src.cur = pd.DataFrame(
        [
            {"run": r["run"], "step": t, "loss": 0.5 if t >= jump.get(r["run"], 99) else 0.03}
            for r in rows
            for t in range(1, 11)
        ]
    )
    got = {(r["label"], r["seed"]): r for r in _late_blowups(src)}
    assert set(got) == {("mx_ln", 0), ("mx_ln", 1), ("mx_none", 1)}  # seed 2's onset is before half
    assert got["mx_ln", 0]["onset"] == 8 and got["mx_ln", 0]["sweep"] == "proxy_released"
    assert [got[k]["γ in E4M3"] for k in sorted(got)] == [True, True, False]
    assert [got[k]["twin stable"] for k in sorted(got)] == [True, False, True]
    assert got["mx_ln", 0]["γ unquantized (same seed)"] == "stable"
    assert got["mx_ln", 1]["γ unquantized (same seed)"] == "blew up"
    assert got["mx_none", 1]["γ unquantized (same seed)"] == "–"  # it is the control itself

    # an LR axis: the control is the same seed's γ-unquantized run at the same LR, not the first one
    hi = {**steps, "train.lr": 0.016}
    lr = [{**r, "train.lr": 0.008} for r in rows] + [
        _run("ln_hi_s1", "mx_ln", 1, final=0.09, twin=0.03, spike=8, **hi),
        _run("none_hi_s1", "mx_none", 1, final=0.03, twin=0.03, norm_affine="none", **hi),
    ]
    axis = Source(
        "proxy_mechanism_d128_lr", "python launch.py -m experiment=proxy_mechanism_d128_lr", tmp_path
    )
    axis.__dict__["runs"] = proxy.proxy_runs(pd.DataFrame(lr))
    axis.cur = pd.concat([src.cur, src.cur[src.cur["run"] == "ln_s1"].assign(run="ln_hi_s1")])
    got = {(r["label"], r["seed"], r["lr"]): r for r in _late_blowups(axis)}
    assert got["mx_ln", 1, 0.016]["γ unquantized (same seed)"] == "stable"  # none_s1 at 0.008 blew up
    assert got["mx_ln", 1, 0.008]["γ unquantized (same seed)"] == "blew up"


def test_one_column_proxy_figures_keep_their_titles_inside():
    """A sweep with one phase-1 variant (a late search) or one branch point (a fixed branch step) draws
    a one-column figure: its title wraps instead of running off both edges, and nothing is under 9 pt."""
    from test_lmstudy import assert_readable

    from analysis import plots

    rows = [
        _run("ln_s0", "mx_ln_e4m3", 0, final=0.09, twin=0.03, spike=6),
        _run("b_s0", "mx_ln_e4m3→no_mx@4", 0, final=0.03, parent="ln_s0", branch_step=4),
        _run("a_s0", "mx_ln_e4m3→adam_b2_95@4", 0, final=0.03, parent="ln_s0", branch_step=4),
    ]
    runs = proxy.proxy_runs(pd.DataFrame(rows))
    cur = pd.DataFrame(
        [{"run": r, "step": t, "loss": 0.03 + 0.1 * (t > 6), "twin_loss": 0.03, "twin_cos": 0.9,
          "clip_ln/blocks.0.norm": 1.0} for r in ("ln_s0", "b_s0", "a_s0") for t in range(1, 11)]
    )  # fmt: skip
    # two interventions: the legend's four entries (parent, twin, both branches) wrap, not clipped
    for fig in (plots.proxy_mechanism(cur, runs), plots.proxy_branches(cur, runs)):
        assert len({ax.get_subplotspec().colspan.start for ax in fig.axes if ax.get_visible()}) == 1
        assert_readable(fig)
    # five parents at one branch point (as in proxy_mechanism_seeds16_adam_branch): two columns, not one tall
    # one; the odd parent's neighbour stays empty
    six = [r for s in (0, 11, 2, 3, 4) for r in (
        _run(f"ln_s{s}", "mx_ln_e4m3", s, final=0.09, twin=0.03, spike=6),
        _run(f"b_s{s}", "mx_ln_e4m3→no_mx@4", s, final=0.03, parent=f"ln_s{s}", branch_step=4),
        _run(f"a_s{s}", "mx_ln_e4m3→adam_b2_95@4", s, final=0.03, parent=f"ln_s{s}", branch_step=4),
    )]  # fmt: skip
    cur6 = pd.DataFrame([{"run": r["run"], "step": t, "loss": 0.03, "twin_loss": 0.03} for r in six
                         for t in range(1, 11)])  # fmt: skip
    fig = plots.proxy_branches(cur6, proxy.proxy_runs(pd.DataFrame(six)))
    shown = [ax for ax in fig.axes if ax.get_visible()]
    assert len(shown) == 5 and {ax.get_subplotspec().colspan.start for ax in shown} == {0, 1}
    # each parent once, in the order of its seed (not of its run name: seed 11 after seed 4)
    assert [ax.get_title().split(",")[0] for ax in shown] == [
        f"mx_ln_e4m3 seed {s}" for s in (0, 2, 3, 4, 11)
    ]
    assert_readable(fig)
    # eight seeds in one column (proxy_mechanism_lr_fine at one LR): the seed legend wraps, not clipped
    eight = proxy.proxy_runs(
        pd.DataFrame([_run(f"ln_s{s}", "mx_ln_e4m3", s, final=0.03, twin=0.03) for s in range(8)])
    )
    cur8 = pd.DataFrame([{"run": f"ln_s{s}", "step": t, "loss": 0.03, "twin_loss": 0.03, "twin_cos": 0.9,
                          "clip_ln/blocks.0.norm": 1.0} for s in range(8) for t in range(1, 11)])  # fmt: skip
    fig = plots.proxy_mechanism(cur8, eight)
    assert len(fig.legends[0].get_texts()) == 8
    assert_readable(fig)


def test_blowup_rates_over_the_learning_rate_at_one_setting(tmp_path):
    """1.1 over the LR: one row per LR run at proxy_mechanism's setting (a sweep at another width is
    left out), with the rates of γ in E4M3, γ unquantized and the fp32 twins, and 1.1's rule there."""
    from analysis.results.common import NOT, REPRODUCED, Source, _Doc
    from analysis.results.mechanism import _scan, _setting_bases

    def sweep(name, lr, width, rows, teacher=""):
        path = tmp_path / name
        path.mkdir()
        (path / "multirun.yaml").write_text(f"train:\n  lr: {lr}\nmodel:\n  width: {width}\n{teacher}")
        src = Source(name, f"python launch.py -m experiment={name}", path)
        src.df = pd.DataFrame(rows)
        src.__dict__["runs"] = proxy.proxy_runs(pd.DataFrame(rows).assign(**{"train.lr": lr}))
        return src

    def none(s):
        return _run(f"none_s{s}", "mx_none", s, final=0.03, twin=0.03, norm_affine="none")

    mech = sweep(
        "proxy_mechanism", 0.004, 256,
        [_run("ln_s0", "mx_ln", 0, final=math.nan, twin=0.03, status="diverged"),
         _run("ln_s1", "mx_ln", 1, final=0.09, twin=0.03), none(0), none(1)],
    )  # fmt: skip
    low = sweep(
        "proxy_mechanism_lr3", 0.003, 256,
        [_run("ln_s0", "mx_ln", 0, final=0.01, twin=0.03),  # its twin ended 3× it: the rule's mirror
         _run("ln_s1", "mx_ln", 1, final=0.031, twin=0.03, twin_diverged=900), none(0), none(1)],
        teacher="  teacher: residual\n",  # the field proxy_mechanism's records predate, at its default
    )  # fmt: skip
    wide = sweep(
        "proxy_wide", 0.01, 512, [_run("ln_s0", "mx_ln", 0, final=math.nan, twin=0.03, status="diverged")]
    )
    doc = _Doc(tmp_path / "results.md")
    _scan(doc, mech, [low, wide])
    text = "\n".join(doc.lines)
    assert "`proxy_mechanism`, `proxy_mechanism_lr3`;" in text and "proxy_wide" not in text
    table = [line for line in text.splitlines() if line.startswith("| 0.00")]
    assert table == [
        f"| 0.003 | 2 | 0/2 | 0/2 | 1/2 | 1/2 | {NOT} |",
        f"| 0.004 | 2 | 2/2 | 0/2 | 0/2 | 0/2 | {REPRODUCED} |",
    ]
    assert (
        "γ unquantized (where run) at lr 0.004: 1 of the 2 LRs. Its blow-up rate rises with the LR (0/2, 2/2)"
        in text
    )
    high = sweep("proxy_mechanism_lr5", 0.005, 256, [_run("ln_s0", "mx_ln", 0, final=0.03, twin=0.03)])
    doc = _Doc(tmp_path / "results.md")
    _scan(doc, mech, [low, high])  # a peak at 4e-3, no γ-unquantized arm at 5e-3
    text = "\n".join(doc.lines)
    assert "| 0.005 | 1 | 0/1 | – | 0/1 |" in text
    assert (
        "at lr 0.004: 1 of the 3 LRs. Its blow-up rate does not rise monotonically with the LR "
        "(0/2, 2/2, 0/1)" in text
    )
    doc = _Doc(tmp_path / "results.md")
    _scan(doc, mech, [wide])  # one LR at this setting: nothing to scan
    assert doc.lines == []
    only_none = sweep("proxy_none_only", 0.006, 256, [none(0)])  # no γ in E4M3 at 6e-3: no rate, no row
    doc = _Doc(tmp_path / "results.md")
    _scan(doc, mech, [only_none])  # divided 0 blow-ups by 0 seeds before
    assert doc.lines == []

    # each setting gets its own scan over the LR, based on its first sweep: at width 512 too, once a
    # second LR ran there (before, only proxy_mechanism's setting was scanned)
    wider = sweep("proxy_wide_lr", 0.02, 512, [_run("ln_s0", "mx_ln", 0, final=0.03, twin=0.03)])
    bases = _setting_bases([mech, low, wide, high, wider])
    assert [b.name for b in bases] == ["proxy_mechanism", "proxy_wide"]
    doc = _Doc(tmp_path / "results.md")
    for base in bases:
        _scan(doc, base, [mech, low, wide, high, wider])
    text = "\n".join(doc.lines)
    assert "**Over the learning rate at `proxy_wide`'s setting** (`proxy_wide`, `proxy_wide_lr`;" in text
    assert "| 0.01 | 1 | 1/1 |" in text and "| 0.02 | 1 | 0/1 |" in text


def test_a_sweep_with_an_lr_axis_gets_one_block_per_lr(tmp_path):
    """proxy_mechanism_lr_fine: γ in E4M3 only, at two LRs of hydra.sweeper.params, while its
    multirun.yaml keeps the base preset's train.lr (that of proxy_mechanism). Each LR is its own
    comparison, headed with that LR; neither is taken for fresh seeds at proxy_mechanism's setting (so
    nothing is pooled with it), and the missing γ-unquantized arm is said to be not run."""
    from analysis.results.common import Source, _Doc
    from analysis.results.mechanism import _edge_block

    def at(lr, finals):
        return [
            _run(f"ln_lr{lr}_s{s}", "mx_ln", s, final=f, twin=0.03, **{"train.lr": lr})
            for s, f in enumerate(finals)
        ]

    first = tmp_path / "proxy_mechanism"
    first.mkdir()
    (first / "multirun.yaml").write_text("train:\n  lr: 0.004\n")
    mech = Source("proxy_mechanism", "python launch.py -m experiment=proxy_mechanism", first)
    rows = [_run("ln_s0", "mx_ln", 0, final=0.09, twin=0.03, **{"train.lr": 0.004})]
    mech.df = pd.DataFrame(rows)
    mech.__dict__["runs"] = proxy.proxy_runs(pd.DataFrame(rows))
    path = tmp_path / "proxy_mechanism_lr_fine"
    path.mkdir()
    (path / "multirun.yaml").write_text("train:\n  lr: 0.004\n")  # the base's; the runs' LRs differ
    src = Source("proxy_mechanism_lr_fine", "python launch.py -m experiment=proxy_mechanism_lr_fine", path)
    src.__dict__["runs"] = proxy.proxy_runs(
        pd.DataFrame([*at(0.0035, [0.03, 0.03]), *at(0.0045, [0.09, 0.03])])
    )
    doc = _Doc(tmp_path / "results.md")
    _edge_block(doc, [src], mech)
    text = "\n".join(doc.lines)
    heads = [line.split("**")[1] for line in text.splitlines() if line.startswith("**The same comparison")]
    assert heads == [
        "The same comparison at lr 0.0035, seeds 0–1",
        "The same comparison at lr 0.0045, seeds 0–1",
    ]
    assert "**0 of 2 seeds blew up**" in text and "**1 of 2 seeds blew up**" in text
    assert text.count("γ/β unquantized: not run in this sweep.") == 2
    assert "Fresh seeds at the same setting" not in text and "Pooled" not in text


def test_the_prefix_control_tells_the_clamped_prefix_from_any_prefix(tmp_path):
    """The control of 1.3's early fp32 branches: both variants' parents branched into fp32 at one step.
    fp32 branches of γ-in-E4M3 parents unstable in ≥ 2 more seeds than those of γ-unquantized parents →
    the clamped prefix decides; otherwise not. Its γ-in-E4M3 runs are compared, bit for bit, with the
    re-run they repeat."""
    from analysis.results.common import Source, _cited, _Doc
    from analysis.results.interventions import _prefix_control

    def sweep(name, rows):
        path = tmp_path / name
        path.mkdir()
        (path / "multirun.yaml").write_text(
            "model:\n  width: 128\ntrain:\n  lr: 0.008\nsweep:\n  branch_step: 20\n"
        )
        src = Source(name, f"python launch.py -m experiment={name}", path)
        src.df = pd.DataFrame(
            [{**r, "train.steps": 2000, "model.width": 128, "train.lr": 0.008} for r in rows]
        )
        return src

    def rows(hot_fail: int, cold_fail: int):
        out = []
        for s in range(3):
            out.append(_run(f"ln_s{s}", "mx_ln", s, final=0.09, twin=0.03, spike=300, recovered=False))
            out.append(_run(f"none_s{s}", "mx_none", s, final=0.03, twin=0.03, norm_affine="none"))
            for parent, fail in ((f"ln_s{s}", s < hot_fail), (f"none_s{s}", s < cold_fail)):
                label = f"{parent.split('_')[0].replace('ln', 'mx_ln').replace('none', 'mx_none')}→no_mx@20"
                out.append(_run(f"{parent}_fp32", label, s, final=0.2 if fail else 0.031 + s / 1000,
                                parent=parent, branch_step=20, spike=350 if fail else None,
                                norm_affine="none"))  # fmt: skip
        return out

    decided = sweep("proxy_mechanism_d128_control", rows(3, 0))
    decided.archive = tmp_path / "docs" / "records" / "proxy_mechanism_d128_control.tar.xz"
    steps = np.arange(0, 100, 10)
    decided.cur = pd.DataFrame(
        [
            {"run": r, "step": k, "loss": 1.0 / (k + 1), "twin_loss": 0.9 / (k + 1)}
            for r in decided.df["run"]
            for k in steps
        ]
    )
    repeated = sweep(
        "proxy_mechanism_d128_step20", [r for r in rows(3, 0) if "ln_s" in r["run"] and r["train.seed"] != 2]
    )
    doc = _Doc(tmp_path / "docs" / "results.md")
    _prefix_control(doc, decided, repeated)
    text = "\n".join(doc.lines)
    assert "fp32 from step 20: unstable in 3 of 3 seeds after γ in E4M3, in 0 of 3 after γ unquantized: " \
           "the γ-clamped prefix decides the blow-up" in text  # fmt: skip
    assert "Of the 3 γ-in-E4M3 parents that blew up in this sweep, fp32 from step 20 avoided it in 0." in text
    # cited as every sweep is: its command, its records and the archive a fresh checkout restores them from
    assert f"{_cited(decided)}: " in text and "proxy_mechanism_d128_control.tar.xz`" in text
    assert (
        "| 0 | stable | blew up (spike 300) | blew up (spike 350) | stable | stable |" in text
    )  # a seed's row
    assert "the same final val loss, to the bit, in 4 of 4." in text  # seeds 0-1: parent and branch each
    figure = tmp_path / "docs" / "figures" / "proxy_prefix_control_proxy_mechanism_d128_control.png"
    assert figure.stat().st_size > 10_000 and f"]({figure.relative_to(tmp_path / 'docs')})" in text

    # the same runs on other hardware: the fp32 twins differ from step 20 on, and seed 0 did not blow up
    elsewhere = [
        {**r, "hardware.cpu_capability": "AVX512", "hardware.threads": 1, "hardware.cpu": "AMD EPYC 9B14"}
        | ({"final_val_loss": 0.03, "spike_step": None, "recovered": None} if r["run"] == "ln_s0" else {})
        for r in rows(3, 0)
        if "ln_s" in r["run"]
    ]
    other = sweep("other_machine", elsewhere)
    other.cur = decided.cur.assign(
        twin_loss=lambda c: c["twin_loss"] * np.where(c["step"] >= 20, 1 + 3e-6, 1)
    )
    doc = _Doc(tmp_path / "docs" / "other.md")
    _prefix_control(doc, decided, other)
    text = "\n".join(doc.lines)
    assert (
        "the same final val loss, to the bit, in 5 of 6. Their fp32 twins already differ at step 20 (by "
        "3e-06 relative): the two sweeps' fp32 arithmetic differed, i.e. the hardware (summary.json's "
        "`hardware`: AMD EPYC 9B14, AVX512, 1 thread there, not recorded here), not the code. That "
        "difference turned the outcome around in 1 of 3 parents (blew up in one sweep, not in the other: "
        "seeds 0)"
    ) in text

    alike = sweep("alike", rows(2, 1))
    doc = _Doc(tmp_path / "docs" / "alike.md")
    _prefix_control(doc, alike, None)
    text = "\n".join(doc.lines)
    assert "unstable in 2 of 3 seeds after γ in E4M3, in 1 of 3 after γ unquantized: the two prefixes " \
           "leave fp32 about equally unstable" in text  # fmt: skip
    assert "to the bit" not in text

    missing = Source("proxy_mechanism_d128_control", "python launch.py -m x", tmp_path / "nothing")
    doc = _Doc(tmp_path / "docs" / "missing.md")
    _prefix_control(doc, missing, None)
    assert doc.lines[0] == "Not run yet: `python launch.py -m x` (the control of the early fp32 branches)."


def test_optimizer_branches_are_paired_with_fp32_on_the_same_parents():
    """An optimizer branch (Adam's betas or the LR changed at the branch point) is told from the
    precision branches by those settings against its parent's, and set against fp32 parent by parent:
    a rescue by one only counts as discordant, and the exact McNemar p comes from those."""
    rows = []
    for s in range(6):
        rows.append(_run(f"ln_s{s}", "mx_ln", s, final=0.09, twin=0.03, spike=300, recovered=False))
        b95 = s < 5  # β2 0.95 rescues five parents, fp32 one (the sixth)
        rows += [
            _run(f"b_s{s}", "mx_ln→adam_b2_95@100", s, final=0.03 if b95 else 0.09, parent=f"ln_s{s}",
                 branch_step=100, **{"train.betas": "[0.9, 0.95]"}),
            _run(f"f_s{s}", "mx_ln→no_mx@100", s, final=0.09 if s < 5 else 0.03, parent=f"ln_s{s}",
                 branch_step=100),
            _run(f"h_s{s}", "mx_ln→lr_half@100", s, final=0.09, parent=f"ln_s{s}", branch_step=100,
                 **{"train.lr": 4e-3}),
        ]  # fmt: skip
    frame = pd.DataFrame(rows)
    frame["train.lr"] = frame["train.lr"].fillna(8e-3)
    runs = proxy.proxy_runs(frame)
    # no_mx kept its parent's (default) betas and LR
    assert proxy.optimizer_branches(runs) == {
        "adam_b2_95": "Adam's betas to [0.9, 0.95]",
        "lr_half": "the LR from 0.008 to 0.004",
    }
    (p,) = proxy.paired_rescues(runs[runs["parent"].notna()], "adam_b2_95", "no_mx").to_dict("records")
    assert (p["parents"], p["adam_b2_95 avoided"], p["no_mx avoided"]) == (6, 5, 1)
    assert (p["only adam_b2_95"], p["only no_mx"]) == (5, 1)
    assert p["p (exact McNemar, two-sided)"] == pytest.approx(0.21875)  # 2 · P(X ≥ 5), X ~ Bin(6, 1/2)
    assert proxy.betas_of("[0.9, 0.95]") == (0.9, 0.95) and proxy.betas_of(math.nan) is None


def _adam_curve(run, *, onset=None, upd=0.05, gv=0.3, steps=400):
    """Metrics rows every 10 steps: Adam's state flat at (upd, gv) until ``onset``, where the loss and
    Σg²/Σv̂ jump (the twin's step stays at 0.03)."""
    rows = []
    for s in range(10, steps + 1, 10):
        hot = onset is not None and s >= onset
        rows.append({"run": run, "step": s, "loss": 10.0 if hot else 0.05,
                     "adam_gv_max": 200.0 if hot else gv, "adam_gv/matrix": gv / 2, "adam_gv/norm": gv / 4,
                     "adam_upd/matrix": 1.0 if hot else upd, "twin_adam_upd/matrix": 0.03,
                     "twin_adam_gv_max": 0.2})  # fmt: skip
    return rows


def test_adams_state_before_the_onset_and_after_a_branch():
    """adam_state reads each run before its own onset (a run that did not blow up: before the median
    onset of those that did); the lead is where max Σg²/Σv̂ first passes 1; adam_after_branch compares
    a branch's first steps with its parent's last ones, and its final loss with both twins."""
    rows = [
        _run("a", "mx_ln", 0, final=0.5, twin=0.03, spike=300, recovered=False),
        _run("b", "mx_ln", 1, final=0.6, twin=0.03, spike=200, recovered=False),
        _run("c", "mx_ln", 2, final=0.03, twin=0.03),
        _run("a_b95", "mx_ln→adam_b2_95@150", 0, final=0.033, twin=0.022, parent="a", branch_step=150),
    ]
    runs = proxy.proxy_runs(pd.DataFrame(rows))
    branch = [{**r, "run": "a_b95", "adam_upd/matrix": 0.2, "adam_gv/matrix": 1.0}
              for r in _adam_curve("x", upd=0.1) if r["step"] > 150]  # fmt: skip
    cur = pd.DataFrame([*_adam_curve("a", onset=300, upd=0.08), *_adam_curve("b", onset=200, upd=0.07),
                        *_adam_curve("c", upd=0.04, gv=0.2), *branch])  # fmt: skip
    s = proxy.adam_state(runs, cur).set_index("run")
    assert list(s["onset"]) == [300.0, 200.0, 250.0]  # c: the median onset of a and b
    assert s.loc["a", "upd_before"] == pytest.approx(0.08) and s.loc["c", "upd_before"] == pytest.approx(0.04)
    assert s.loc["a", "gv_max_before"] == pytest.approx(0.3) and s.loc["a", "lead"] == 0.0
    assert s.loc["a", "gv_max_peak"] == 200.0 and s.loc["c", "gv_max_peak"] == pytest.approx(0.2)
    assert s.loc["a", "gv_at_branch"] == pytest.approx(0.15) and pd.isna(s.loc["b"].get("gv_at_branch"))
    assert s.loc["a", "twin_upd_before"] == pytest.approx(0.03)
    a = proxy.adam_after_branch(runs, cur).set_index("run")
    assert a.loc["a_b95", "upd_before"] == pytest.approx(0.08) and a.loc[
        "a_b95", "upd_after"
    ] == pytest.approx(0.2)
    assert a.loc["a_b95", "ratio"] == pytest.approx(1.5) and a.loc[
        "a_b95", "ratio_parent_twin"
    ] == pytest.approx(1.1)
    # the MX branch against the fp32 branch with the same betas from the same checkpoint
    fp32 = {"precision_final": "fp32", "norm_affine": "none", "train.betas": "[0.9, 0.95]"}
    mx = {"precision_final": "mxfp8_e4m3-ln_mxfp8_e4m3"}
    rows[3] |= {**mx, "train.betas": [0.9, 0.95]}
    at = dict(parent="a", branch_step=150)
    rows += [_run("a_f95", "mx_ln→fp32_b2_95@150", 0, final=0.022, **at, **fp32),
             _run("a_f", "mx_ln→no_mx@150", 0, final=0.011, **at, **{**fp32, "train.betas": None}),
             _run("a_f95_later", "mx_ln→fp32_b2_95@200", 0, final=0.5, parent="a", branch_step=200,
                  **fp32)]  # fmt: skip
    for r in rows[:3]:
        r |= mx
    pairs = proxy.fp32_siblings(proxy.proxy_runs(pd.DataFrame(rows)))
    assert pairs[["variant", "sibling"]].values.tolist() == [["adam_b2_95", "fp32_b2_95"]]
    assert pairs["ratio"].iloc[0] == pytest.approx(1.5)
    from analysis import plots

    fig = plots.adam_state(cur, proxy.adam_state(runs, cur), "width 256, lr 0.004")
    assert [ax.get_yscale() for ax in fig.axes] == ["log", "log"]
    assert "width 256, lr 0.004" in fig.get_suptitle()  # the sweep's own setting, not width 128's
    assert proxy.adam_state(runs, cur.drop(columns=["adam_gv_max"])).empty  # records without Adam's state


def test_adams_state_of_a_sweep_whose_runs_all_blew_up_says_so(tmp_path):
    """A branch sweep retrains only parents that blew up (proxy_mechanism_seeds16_adam_branch): the
    Adam-state sentence sets them against their twins only, with no "nan" or "–" for the missing MX
    runs that did not blow up; with such runs it still gives the Mann-Whitney comparison."""
    from analysis.results.common import Source, _Doc
    from analysis.results.interventions import _adam_block

    rows = [
        _run("a", "mx_ln", 0, final=0.5, twin=0.03, spike=300, recovered=False),
        _run("b", "mx_ln", 1, final=0.6, twin=0.03, spike=200, recovered=False),
    ]
    cur = [*_adam_curve("a", onset=300, upd=0.08), *_adam_curve("b", onset=200, upd=0.07)]
    texts = {}
    for name, extra, extra_cur in [("all", [], []), ("some", [_run("c", "mx_ln", 2, final=0.03, twin=0.03)],
                                                        _adam_curve("c", upd=0.04, gv=0.2))]:  # fmt: skip
        src = Source(name, "", tmp_path / name)
        src.path.mkdir()
        (src.path / "multirun.yaml").write_text("model:\n  width: 256\ntrain:\n  lr: 0.004\n")
        src.__dict__["runs"] = proxy.proxy_runs(pd.DataFrame(rows + extra))
        src.cur = pd.DataFrame(cur + extra_cur)
        doc = _Doc(tmp_path / f"{name}.md")
        _adam_block(doc, src, "proxy_branches_x.png")
        texts[name] = "\n".join(doc.lines)
    sentence = next(line for line in texts["all"].splitlines() if line.startswith("Before the onset"))
    assert "nan" not in sentence and " – " not in sentence and "Mann-Whitney" not in sentence
    assert "every MX run here blew up, so none to set them against" in sentence
    assert "2.50× their own twins'" in sentence  # 0.075 / 0.03, the median of 0.08 and 0.07 over 0.03
    assert "Mann-Whitney p = " in texts["some"] and "in the MX runs that did not blow up" in texts["some"]


def test_the_step_source_reads_each_precision_at_the_same_steps_before_its_own_onset():
    """step_source takes the Linear weights' normalized step over STEP_WINDOW and stops at the run's own
    onset; paired_steps sets each precision against the reference precision of the same seed."""
    rows, cur = [], []
    steps = {"mx_ln": (0.08, 0.075, 0.07), "mx_none": (0.04, 0.05, 0.09), "ln_only": (0.06, 0.02, 0.03)}
    for label, values in steps.items():
        for seed, upd in enumerate(values):
            run = f"{label}_s{seed}"
            blew = label == "mx_ln" and seed == 0
            rows.append(_run(run, label, seed, final=0.5 if blew else 0.03, twin=0.03,
                             spike=150 if blew else None, recovered=False if blew else None))  # fmt: skip
            curve = _adam_curve(run, onset=150 if blew else None, upd=upd)
            cur += [{**r, "adam_upd/norm": 0.5} for r in curve]
    runs = proxy.proxy_runs(pd.DataFrame(rows))
    s = proxy.step_source(runs, pd.DataFrame(cur)).set_index("run")
    # the blown-up run is read on steps 100–140 only: its step of 1.0 from the onset on is left out
    assert s.loc["mx_ln_s0", "upd"] == pytest.approx(0.08) and s.loc["mx_ln_s0", "onset"] == 150
    assert s.loc["mx_none_s2", "upd"] == pytest.approx(0.09) and pd.isna(s.loc["mx_none_s2", "onset"])
    assert s.loc["ln_only_s1", "upd_vs_twin"] == pytest.approx(0.02 / 0.03)
    assert s.loc["ln_only_s1", "upd_norm"] == pytest.approx(0.5)
    assert s.loc["ln_only_s1", "consistency"] == pytest.approx(0.02 / math.sqrt(0.15))
    assert pd.isna(s.loc["ln_only_s1", "loss_vs_twin"])  # these curves log no twin loss
    assert pd.isna(s.loc["ln_only_s1", "twin_gv"]) and pd.isna(s.loc["ln_only_s1", "twin_consistency"])
    late = proxy.step_source(runs, pd.DataFrame(cur), window=(150, 200)).set_index("run")
    assert pd.isna(late.loc["mx_ln_s0", "upd"])  # no step of the window precedes its onset
    p = proxy.paired_steps(s.reset_index(), "mx_ln").set_index("variant")
    assert list(p.index) == ["mx_none", "ln_only"]
    assert p.loc["mx_none", "below mx_ln"] == "2/3" and p.loc["ln_only", "below mx_ln"] == "3/3"
    assert p.loc["ln_only", "sign test p"] == pytest.approx(0.25)
    assert p.loc["mx_none", "step / mx_ln's (median)"] == pytest.approx(0.05 / 0.075)
    assert proxy.paired_steps(s.reset_index(), "fp32").empty


def test_the_step_source_block_sets_each_precision_against_the_reference_and_its_twin(tmp_path):
    """The 1.2 block of a STEP_SOURCE sweep: per precision its blow-ups, its step against its twin's and
    against the reference precision of the same seed; the pooled comparison of runs that blew up with
    those that did not; whether the twins of a seed agree to the bit; each precision against its twins."""
    from analysis.results.common import _Doc
    from analysis.results.from_init import _step_source_block

    rows, cur = [], []
    for label, ups in {"mx_ln": (0.08, 0.075, 0.07, 0.08), "ln_only": (0.06, 0.07, 0.03, 0.02)}.items():
        for seed, upd in enumerate(ups):
            blew = upd >= 0.07
            rows.append(_run(f"{label}_s{seed}", label, seed, final=0.5 if blew else 0.03,
                             twin=0.03 if seed else 0.03 + (label == "ln_only") * 1e-9,
                             spike=300 if blew else None, recovered=False if blew else None))  # fmt: skip
            cur += [{**r, "adam_upd/norm": 0.5, "twin_adam_gv/matrix": 0.09, "twin_loss": r["loss"] * 1.25}
                    for r in _adam_curve(f"{label}_s{seed}", upd=upd)]  # fmt: skip
    src = _source(tmp_path, "proxy_mechanism_d128_step_source", rows, "model:\n  width: 128\n")
    src.cur = pd.DataFrame(cur)
    doc = _Doc(tmp_path / "results.md")
    _step_source_block(doc, src, "mx_ln")
    text = "\n".join(doc.lines)
    assert "| mx_ln | 4 | 4 | 4/4 | 0.0775 |" in text
    # consistency: step / √(Σg²/Σv̂) = 0.0775 / √0.15; the twin's 0.03 / √0.09
    assert "| mx_ln | 4 | 4 | 4/4 | 0.0775 | 0.07–0.08 | 2.583 | 4/4 | 0.15 | 0.09 | 0.2001 | 0.1 |" in text
    # ln_only: one seed blew up (step 0.07); its steps are below mx_ln's in 4 of 4 seeds (p = 0.125)
    assert "| ln_only | 4 | 1 | 4/4 | 0.045 | 0.02–0.07 | 1.5 | 2/4 | 0.15 | 0.09 | 0.1162 | 0.1 |" in text
    assert "| 0.1 | 0.5 | 0.8 | – | – |" in text and "| 0.1 | 0.5 | 0.8 | 4/4 | 0.125 |" in text
    assert "the 5 that blew up" in text and "the 3 that did not 0.02–0.06" in text
    assert "to the bit in 3 of 4 seeds" in text  # seed 0's twins differ by 1e-9
    assert "`ln_only` blew up in 1 of 4 seeds, its fp32 twins were unstable in 0; the run alone in 1" in text
    assert (tmp_path / "figures" / "proxy_step_source_proxy_mechanism_d128_step_source.png").exists()
    assert "as a predictor" not in text  # only a sweep on fresh seeds is scored against a threshold
    doc = _Doc(tmp_path / "results.md")
    _step_source_block(doc, src, "mx_ln", trained=src)  # here its own runs set the threshold
    text = "\n".join(doc.lines)
    assert (
        "best separated the runs of `proxy_mechanism_d128_step_source`, pooled over its precisions, 0.0650"
        in text
    )
    assert "5 of 5 runs that blew up were predicted, 0 of 3 that did not were flagged" in text


def test_a_step_threshold_from_one_sweep_predicts_the_blowups_of_another():
    """step_threshold picks the midpoint that best separates the runs that blew up by their step;
    step_prediction scores "blows up iff step > threshold" on other runs, leaving out those with no
    step to read (blown up before the window)."""
    train = pd.DataFrame({"upd": [0.02, 0.03, 0.05, 0.06, 0.07, 0.08],
                          "blew_up": [False, False, False, True, False, True]})  # fmt: skip
    assert proxy.step_threshold(train) == pytest.approx(0.055)  # 2/2 hits, 3/4 rejections
    assert math.isnan(proxy.step_threshold(train.assign(blew_up=False)))
    test = pd.DataFrame({"upd": [0.01, 0.04, 0.06, 0.09, 0.1, np.nan],
                         "blew_up": [False, True, False, True, True, True]})  # fmt: skip
    p = proxy.step_prediction(test, 0.055)
    assert (p["runs"], p["unread"], p["hit"], p["miss"], p["false alarm"], p["correct rejection"]) == (
        5,
        1,
        2,
        1,
        1,
        1,
    )
    assert p["balanced accuracy"] == pytest.approx((2 / 3 + 1 / 2) / 2)
    assert p["p (Fisher, one-sided)"] == pytest.approx(0.7)  # P(≥ 2 hits | margins 3, 2; 3, 2)


def test_an_interrupted_canonical_run_says_how_far_it_got_and_leaves_the_verdict(tmp_path):
    """The canonical run cut short by a GPU lease: its table gives each run's steps of 9,000, its
    outcome so far, γ's clip fraction and Adam's step over its last steps and the machine from the
    records; the line against the study's step 5,090 names how far γ in E4M3 got; and it is complete
    (and so decides 1.4) only when every run finished."""
    import json

    from analysis.results.common import _Doc
    from analysis.results.late import _canonical_block, _canonical_complete

    shape = {"train.steps": 9000, "hardware.cuda": "NVIDIA H200", "versions.torch": "2.11.0+cu130"}
    rows = [
        _run("e4m3", "mx_ln_e4m3", 1337, final=0.0021, twin=0.0021, status="interrupted", step=5469, **shape),
        _run(
            "none",
            "mx_ln_none",
            1337,
            final=0.0022,
            twin=0.0021,
            status="interrupted",
            step=5907,
            norm_affine="none",
            **shape,
        ),  # fmt: skip
    ]
    src = _source(tmp_path, "proxy_canonical", rows, "train:\n  steps: 9000\n")
    (src.path / "gpu_check.json").write_text(
        json.dumps({"steps": [{"step": "proxy", "message": "incomplete", "numbers": {"backend": "eager"}}]})
    )
    src.cur = pd.DataFrame(
        [
            {
                "run": run,
                "step": t,
                "loss": 0.002,
                "twin_loss": 0.002,
                "clip_ln/a": clip,
                "clip_ln/b": clip + 0.2,
                "adam_upd/matrix": 0.12,
                "twin_adam_upd/matrix": 0.1,
            }  # fmt: skip
            for run, last, clip in (("e4m3", 5469, 0.4), ("none", 5907, 0.1))
            for t in range(10, last + 1, 10)
        ]
    )
    assert not _canonical_complete(src)
    doc = _Doc(tmp_path / "docs" / "results.md")
    _canonical_block(doc, src)
    text = "\n".join(doc.lines)
    assert "(NVIDIA H200, torch 2.11.0+cu130; quantizer backend eager;" in text
    assert (
        "| mx_ln_e4m3 | 5,469 of 9,000 | interrupted | none by step 5,469 | 1 | 0.5 | 0.120 / 0.100 |" in text
    )
    assert "| mx_ln_none | 5,907 of 9,000 | interrupted | none by step 5,907 | 1.048 | 0.2 |" in text
    assert "had no spike or divergence through step 5,469 (past that point), and its last 3,531 steps" in text
    assert (tmp_path / "docs" / "figures" / "proxy_canonical.png").exists()
    done = _source(tmp_path / "docs", "proxy_canonical", [{**r, "status": "done"} for r in rows], "")
    assert _canonical_complete(done)


def test_a_finished_canonical_run_decides_late_blowups_by_gamma_format(tmp_path):
    """The canonical run finished: its γ-in-E4M3 run blew up after half of its steps, so it is a late
    blow-up 1.4 counts; the γ-in-bf16 run blew up late too but is not "γ in E4M3" (a defect: every
    quantized γ was labelled E4M3); the block names each run's outcome against the study's step."""
    from analysis.results.common import _Doc
    from analysis.results.late import _canonical_block, _canonical_complete, _late_blowups

    shape = {"train.steps": 9000, "status": "done", "step": 9000}
    rows = [
        _run("e4m3", "mx_ln_e4m3", 1337, final=0.077, twin=0.0022, spike=7843, recovered=False, **shape),
        _run("bf16", "mx_ln_bf16", 1337, final=0.015, twin=0.0022, spike=7043, recovered=False,
             norm_affine="bf16", **shape),
        _run("none", "mx_ln_none", 1337, final=0.0022, twin=0.0022, norm_affine="none", **shape),
    ]  # fmt: skip
    src = _source(tmp_path, "proxy_canonical", rows, "train:\n  steps: 9000\n")
    jumps = {"e4m3": 7850, "bf16": 7050, "none": 10**9}
    src.cur = pd.DataFrame(
        [
            {"run": run, "step": t, "loss": 0.2 if t >= at else 0.002, "twin_loss": 0.002, "clip_ln/a": 0.1,
             "twin_cos": 0.5}
            for run, at in jumps.items()
            for t in range(50, 9001, 50)
        ]
    )  # fmt: skip
    assert _canonical_complete(src)
    late = {r["label"]: r for r in _late_blowups(src)}
    assert set(late) == {"mx_ln_e4m3", "mx_ln_bf16"}
    assert late["mx_ln_e4m3"]["γ in E4M3"] and not late["mx_ln_bf16"]["γ in E4M3"]
    assert late["mx_ln_bf16"]["γ unquantized (same seed)"] == "stable"
    # a one-step transient long before the spike (the H200's γ-in-bf16 run had one at step 240): the
    # sentence still names the recorded spike
    src.cur.loc[(src.cur["run"] == "bf16") & (src.cur["step"] == 250), "loss"] = 0.2
    doc = _Doc(tmp_path / "docs" / "results.md")
    _canonical_block(doc, src)
    text = "\n".join(doc.lines)
    assert "Every run finished." in text
    assert (
        "diverged near step 5,090 of 9,000; here mx_ln_bf16 (γ/β bf16) blew up at step 7,043 and ended at "
        "6.82× its twin's val loss; mx_ln_e4m3 (γ/β fp8_e4m3) blew up at step 7,843 and ended at 35× its "
        "twin's val loss; mx_ln_none (γ/β none) did not blow up (ended at 1× its twin's)." in text
    )
    # the same precision on several seeds (proxy_canonical_seeds): each run is named by its seed
    seeds = [_run(f"e{k}", "mx_ln_e4m3", k, final=0.0022, twin=0.0022, **shape) for k in (1339, 1338)]
    more = _source(tmp_path / "docs", "proxy_canonical_seeds", seeds, "train:\n  steps: 9000\n")
    doc = _Doc(tmp_path / "docs" / "results.md")
    _canonical_block(doc, more, figure="proxy_canonical_seeds.png")
    assert (
        "here mx_ln_e4m3 seed 1338 (γ/β fp8_e4m3) did not blow up (ended at 1× its twin's); mx_ln_e4m3 seed "
        "1339" in "\n".join(doc.lines)
    )


def test_gamma_in_bf16_is_set_against_gamma_in_e4m3_seed_by_seed(tmp_path):
    """γ/β rounded to bf16 against γ/β in E4M3 on the same seeds: the blow-ups of each, the seeds where
    only one blew up with the one-sided McNemar p, the base sweep's γ-unquantized runs on those seeds,
    and the fp32 twins compared across the two sweeps."""
    from analysis.results.common import _Doc
    from analysis.results.from_init import _gamma_format_block

    base_rows, rows = [], []
    for seed in range(6):
        e4m3_blew = seed < 4  # seeds 0–3 blew up with γ in E4M3; only seed 0 also in bf16
        base_rows += [
            _run(f"e_s{seed}", "mx_ln_e4m3", seed, final=0.5 if e4m3_blew else 0.03, twin=0.03,
                 spike=300 if e4m3_blew else None, recovered=False if e4m3_blew else None),
            _run(f"n_s{seed}", "mx_ln_none", seed, final=0.03, twin=0.03, norm_affine="none"),
        ]  # fmt: skip
        rows.append(
            _run(f"b_s{seed}", "mx_ln_bf16", seed, final=0.5 if seed == 0 else 0.03,
                 twin=0.03 if seed else 0.031, norm_affine="bf16", spike=300 if seed == 0 else None,
                 recovered=False if seed == 0 else None)
        )  # fmt: skip
    base = _source(tmp_path, "proxy_mechanism_d128", base_rows, "")
    src = _source(tmp_path, "proxy_mechanism_d128_bf16", rows, "")
    doc = _Doc(tmp_path / "results.md")
    _gamma_format_block(doc, src, [(base, {"mx_ln_bf16": "mx_ln_e4m3"})])
    text = "\n".join(doc.lines)
    # 3 seeds blew up only in E4M3, none only in bf16: p = 1/8; seed 0's twins differ
    assert (
        "| mx_ln_bf16 (bf16) | `proxy_mechanism_d128` mx_ln_e4m3 (fp8_e4m3) | 6 | 1 / 4 | 0 / 6 | 3 / 0 "
        "| 0.125 | 5/6 | 1 |" in text
    )


def test_pooling_keeps_only_pairings_whose_twins_agree_to_the_bit():
    """The pooled McNemar sums the seeds of every pairing whose fp32 twins agree to the bit in every
    seed (one float path); a pairing from another machine (twins differ) stays out, and one pairing
    alone is not pooled."""
    from analysis.results.from_init import _paired, _pooled_same_machine

    def rows(label, seeds, ups, twin=0.03):
        return proxy.proxy_runs(pd.DataFrame([
            _run(f"{label}{s}", label, s, final=0.5 if s in ups else 0.03, twin=twin,
                 spike=300 if s in ups else None, recovered=False if s in ups else None)
            for s in seeds
        ]))  # fmt: skip

    bf16 = rows("bf16_", range(8), {0})
    e4m3 = rows("e4m3_", range(8), {0, 1, 2, 3})  # 3 seeds only in E4M3
    e4m3_more = rows("e4m3_", range(8, 12), {8, 9})
    bf16_more = rows("bf16_", range(8, 12), {10})  # 2 only in E4M3, 1 only in bf16
    other_machine = rows("e4m3_", range(8), {0, 1, 2, 3, 4, 5}, twin=0.031)
    same1 = _paired(bf16, "bf16_", e4m3, "e4m3_")
    same2 = _paired(bf16_more, "bf16_", e4m3_more, "e4m3_")
    other = _paired(bf16, "bf16_", other_machine, "e4m3_")
    assert (same1.only_b, same1.only_a, same2.only_b, same2.only_a) == (3, 0, 2, 1)
    assert _pooled_same_machine([same1, other]) is None
    text = _pooled_same_machine([same1, other, same2])
    # 5 only in E4M3, 1 only in bf16: P(X ≥ 5 | 6, 1/2) = 7/64
    assert text == (
        "Pooled over the 2 same-machine pairings above (fp32 twins equal to the bit in every seed; 12 "
        "seeds): γ in bf16 blew up in 2, γ in E4M3 in 6; only with γ in E4M3 5, only with γ in bf16 1: "
        "exact McNemar, one-sided, p = 0.11."
    )


def test_the_clamp_control_sets_ceil_against_floor_seed_by_seed(tmp_path):
    """γ in E4M3 under the ceil rule against the floor rule on the same seeds: blow-ups of each, the
    seeds where only one blew up with the one-sided McNemar p, Adam's step before the onset and in how
    many seeds ceil's is lower, γ's clip fraction over the step window, and the twins compared across
    the two sweeps."""
    from analysis.results.common import _Doc
    from analysis.results.from_init import _clamp_control_block

    def sweep(name, label, blown, upd, clip):
        rows, cur = [], []
        for seed in range(6):
            blew = seed in blown
            run = f"{label}_s{seed}"
            rows.append(_run(run, label, seed, final=0.5 if blew else 0.03, twin=0.03 + seed * 1e-3,
                             spike=300 if blew else None, recovered=False if blew else None))  # fmt: skip
            curve = _adam_curve(run, onset=300 if blew else None, upd=upd + seed * 1e-3)
            cur += [{**r, "clip_ln/a": clip, "clip_ln/b": clip} for r in curve]
        src = _source(tmp_path, name, rows, "")
        src.cur = pd.DataFrame(cur)
        return src

    floor = sweep("proxy_mechanism_d128_step_source", "ln_only", {0, 1, 2, 3, 4}, upd=0.07, clip=1.0)
    ceil = sweep("proxy_mechanism_d128_ceil", "ln_only_ceil", {5}, upd=0.03, clip=0.0)
    doc = _Doc(tmp_path / "results.md")
    _clamp_control_block(doc, ceil, floor, {"ln_only_ceil": "ln_only"})
    text = "\n".join(doc.lines)
    # 5 seeds blew up under floor only, 1 under ceil only: P(X >= 5 | n = 6, 1/2) = 7/64
    row = "| ln_only_ceil | ln_only | 6 | 1 / 5 | 5 / 1 | 0.1094 | 0.0325 / 0.0725 | 6/6 | 0.000 / 1.000 |"
    assert row in text, text
    assert "the bit in 6 of 6 pairs" in text
    assert "**γ's clamp or γ's rounding?** (`proxy_mechanism_d128_ceil`" in text


def test_the_interventions_precisions_from_init_are_paired_by_lr_and_seed(tmp_path):
    """A from-init sweep that retrains another sweep's seeds at both of its LRs: each precision is set
    against the base precision pair by pair of (LR, seed), not by seed alone (a seed appears once per
    LR), per LR and over all with the one-sided McNemar p; the precision retrained as it was is the
    same-machine check, to the bit."""
    from analysis.results.common import _Doc
    from analysis.results.from_init import _from_init_block

    ups = {(0.064, 0), (0.064, 1), (0.032, 2)}  # full MX (γ unquantized) blew up at these (lr, seed)
    base_rows, rows = [], []
    for lr in (0.032, 0.064):
        for seed in range(4):
            blew = (lr, seed) in ups
            kw = {"train.lr": lr, "norm_affine": "none", "recovered": False if blew else None}
            final = 0.5 + seed if blew else 0.03 + seed / 1000
            base_rows.append(
                _run(
                    f"n_{lr}_s{seed}",
                    "mx_ln_none",
                    seed,
                    final=final,
                    twin=0.03,
                    spike=300 if blew else None,
                    **kw,
                )
            )
            rows.append(
                _run(
                    f"r_{lr}_s{seed}",
                    "mx_ln_none",
                    seed,
                    final=final,
                    twin=0.03,
                    spike=300 if blew else None,
                    **kw,
                )
            )
            bf16 = (lr, seed) == (0.032, 3)  # bf16 activations blew up only where full MX did not
            kw["recovered"] = False if bf16 else None
            low = 0.01 if (lr, seed) == (0.064, 3) else 0.03  # its twin ends 3× it: the rule's mirror
            rows.append(
                _run(f"b_{lr}_s{seed}", "mx_bf16a", seed, final=0.5 if bf16 else low, twin=0.03,
                     spike=300 if bf16 else None, **kw)
            )  # fmt: skip
    base = _source(tmp_path, "proxy_mechanism_d128_swiglu_hi", base_rows, "")
    src = _source(tmp_path, "proxy_mechanism_d128_swiglu_source", rows, "")
    doc = _Doc(tmp_path / "results.md")
    _from_init_block(doc, src, base, {"mx_ln_none": "mx_ln_none", "mx_bf16a": "mx_ln_none"})
    text = "\n".join(doc.lines)
    against = "`proxy_mechanism_d128_swiglu_hi` mx_ln_none"
    assert f"| mx_bf16a | {against} | 0.032 | 4 | 1 / 1 | 1 / 1 | 1 | 4/4 |" in text
    assert f"| mx_bf16a | {against} | 0.064 | 4 | 0 / 2 | 2 / 0 | 0.5 | 4/4 | 1 / 0 |" in text
    # over all 8 pairs: 3 only with full MX, 1 only with bf16 activations: two-sided 2 · 5/16
    assert f"| mx_bf16a | {against} | all | 8 | 1 / 3 | 3 / 1 | 0.625 | 8/8 |" in text
    assert f"| mx_ln_none | {against} | all | 8 | 3 / 3 | 0 / 0 | 1 | 8/8 |" in text
    assert "`mx_ln_none` in 8 of 8 pairs" in text
    assert "mx_bf16a 1 / 1 of 8 (p = 0.75)" in text  # the mirror, per precision
    # fresh seeds: the sweep set against its own full-MX runs (FROM_INIT's base is the sweep itself)
    doc = _Doc(tmp_path / "fresh.md")
    _from_init_block(doc, src, src, {"mx_bf16a": "mx_ln_none"})
    text = "\n".join(doc.lines)
    assert "Fresh seeds, each precision from init" in text and "retrained" not in text
    own = "`proxy_mechanism_d128_swiglu_source` mx_ln_none"
    assert f"| mx_bf16a | {own} | all | 8 | 1 / 3 | 3 / 1 | 0.625 | 8/8 |" in text
    # one LR: its row is the whole sweep, no "all" row repeating it
    one = _source(tmp_path, "proxy_mechanism_d128_fwd", [r for r in rows if r["train.lr"] == 0.032], "")
    doc = _Doc(tmp_path / "one.md")
    _from_init_block(doc, one, base, {"mx_bf16a": "mx_ln_none"})
    text = "\n".join(doc.lines)
    assert f"| mx_bf16a | {against} | 0.032 | 4 | 1 / 1 | 1 / 1 | 1 | 4/4 |" in text and "| all |" not in text
    assert "have not finished" not in text  # no manifest: nothing says more were asked
    # a sweep stopped early: its manifest asked for more runs than finished, and the block says so
    (one.path / "manifest.json").write_text(
        json.dumps({"asked": [f"r{i}" for i in range(len(one.runs) + 3)]})
    )
    doc = _Doc(tmp_path / "stopped.md")
    _from_init_block(doc, one, base, {"mx_bf16a": "mx_ln_none"})
    assert f"3 of its {len(one.runs) + 3} runs have not finished (the sweep was stopped" in "\n".join(
        doc.lines
    )


def test_wall_time_of_a_resumed_sweep_leaves_out_the_gap_between_sessions(tmp_path):
    """A sweep stopped and resumed in a later session: its wall time leaves out the stretch in which
    no run ran, but keeps the short gaps of a sweep that ran in one go."""
    import os

    from analysis.results.common import Source

    path = tmp_path / "sweep"
    # two overlapping runs (0–100 s, 50–150 s), one after a 60-s gap (210–300 s); a session later
    # (an hour on) one more (3,900–4,000 s) and a run started but never finished (no summary.json)
    spans = [("a", 0, 100), ("b", 50, 150), ("c", 210, 300), ("d", 3900, 4000), ("e", 3950, None)]
    for name, start, end in spans:
        run = path / name
        run.mkdir(parents=True)
        (run / "config.yaml").write_text("{}")
        os.utime(run / "config.yaml", (1e9 + start, 1e9 + start))
        if end is not None:
            (run / "summary.json").write_text("{}")
            os.utime(run / "summary.json", (1e9 + end, 1e9 + end))
    assert Source("s", "", path).wall == "6 min 40 s"  # 300 s + 100 s; first start to last end: 1 h 06 min
    assert Source("none", "", tmp_path / "none").wall == "–"
    (path / "summary.json").write_text(json.dumps({"wall_time": 3725.0}))  # a study's single record
    assert Source("s", "", path).wall == "1 h 02 min"
