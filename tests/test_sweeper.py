"""The sweeper: budget → runs (golden), run identities, skip logic, dry run, manifest, --status, bad
input, and whole sweeps through launch.py with the basic and submitit_local launchers (including a
preempted job that is requeued and ends bit-identical to an uninterrupted one)."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from collections import Counter
from dataclasses import dataclass, replace
from pathlib import Path

import pytest
from launching import REPO, child_env, launch
from omegaconf import OmegaConf

from models import LMConfig, ProxyConfig
from records import run as record
from sweeper import budget
from sweeper.grid import PlannedRun
from sweeper.identity import run_id
from sweeper.status import counts, run_status, scan
from sweeper.sweep import decide
from sweeper.table import loss as num_loss
from train.config import PrecisionConfig, RunConfig, TrainConfig

QUIET = ["sweep.progress=false", "logger=disabled"]


def sweep(sweep_dir: Path, *overrides: str, experiment: str = "smoke") -> subprocess.CompletedProcess:
    return launch("-m", f"experiment={experiment}", f"hydra.sweep.dir={sweep_dir}", *QUIET, *overrides)


# --------------------------------------------------------------------------------------------- budget


@dataclass(frozen=True)
class Shape:
    n_params: int


def test_budget_hand_computed():
    # N = 1000, 10 tokens per step: C = 6e6 buys floor(6e6 / (6·1000·10)) = 100 steps, D = 1000, D/N = 1.
    (p,) = budget.plan([6e6], [Shape(1000)], 10, ratio_min=0.5, ratio_max=10)
    assert (p.steps, p.D, p.ratio, p.warmup_steps, p.eval_every) == (100, 1000, 1.0, 20, 10)
    assert p.flops == 6e6 and p.C == 6e6
    (p,) = budget.plan([6e6 - 1], [Shape(1000)], 10, ratio_min=0.5, ratio_max=10)
    assert p.steps == 99 and p.warmup_steps == 19 and p.eval_every == 9  # floor, int(0.2·99), 99 // 10
    # the window is strict: D/N = 1 is dropped by (1, 10) and by (0.5, 1)
    with pytest.raises(ValueError, match="no \\(budget, shape\\) pair"):
        budget.plan([6e6], [Shape(1000)], 10, ratio_min=1, ratio_max=10)
    # two shapes, one budget: N = 100 → 1000 steps, D/N = 100 (kept); N = 10000 → 10 steps, D/N = 0.01
    points = budget.plan([6e6], [Shape(100), Shape(10000)], 10)
    assert [(p.N, p.steps, p.ratio) for p in points] == [(100, 1000, 100.0)]


def _paper_shapes():
    return [LMConfig(depth=L, vocab_size=32000) for L in [*range(4, 23), *range(24, 41, 2)]]


def test_budget_reproduces_the_study_grid():
    budgets = budget.geomspace(2e17, 1e19, 6) + [2.2e19, 4.84e19]
    points = budget.plan(budgets, _paper_shapes(), 512 * 512)
    assert len(points) == 95
    assert list(Counter(p.C for p in points).values()) == [8, 10, 11, 13, 14, 13, 13, 13]
    # by hand: N = 12·L·d² + 2·V·d + 4·L·d + d at d704L11 = 110,508,992; 2e17 / (6·N·262144) = 1150.6
    (p,) = [p for p in points if p.C == 2e17 and p.shape.depth == 11]
    assert p.N == 12 * 11 * 704**2 + 2 * 32000 * 704 + 4 * 11 * 704 + 704 == 110_508_992
    assert (p.steps, p.D, p.warmup_steps, p.eval_every) == (1150, 301_465_600, 230, 115)
    (p,) = [p for p in points if p.C == 4.84e19 and p.shape.depth == 15]  # the study's longest run, 35.5B
    assert (p.N, p.steps, p.D) == (227_386_560, 135_328, 35_475_423_232)
    assert all(2 < p.ratio < 200 for p in points)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"budgets": [0.0]}, r"budget.flops\[0\]=0.0 must be a positive"),
        ({"budgets": [1e9, -1]}, r"budget.flops\[1\]=-1 must be a positive"),
        ({"ratio_min": 200.0, "ratio_max": 2.0}, "ratio_min < ratio_max"),
        ({"ratio_min": 5.0, "ratio_max": 5.0}, "ratio_min < ratio_max"),
        ({"budgets": [1e3]}, "no \\(budget, shape\\) pair has 2 < D/N < 200"),
    ],
)
def test_budget_bad_input(kwargs, match):
    args = {"budgets": [6e6], "shapes": [Shape(100)], "tokens_per_step": 10, **kwargs}
    with pytest.raises(ValueError, match=match):
        budget.plan(args.pop("budgets"), args.pop("shapes"), args.pop("tokens_per_step"), **args)


# ------------------------------------------------------------------------------------------ identity


def _run(**changes) -> RunConfig:
    base = RunConfig(task="proxy", model=ProxyConfig(depth=2, width=16), train=TrainConfig(steps=10))
    return replace(base, **changes)


def test_run_id_is_stable_and_ignores_where_and_how_it_is_watched():
    a = _run()
    assert run_id(a) == run_id(_run()) and re.fullmatch(r"[0-9a-f]{8}", run_id(a))
    assert run_id(replace(a, out_dir="/elsewhere/x")) == run_id(a)
    assert run_id(replace(a, train=replace(a.train, device="cuda"))) == run_id(a)
    logger = replace(a.logger, wandb=replace(a.logger.wandb, mode="offline", group="g"))
    assert run_id(replace(a, logger=logger)) == run_id(a)
    assert run_id(replace(a, train=replace(a.train, lr=1))) == run_id(
        replace(a, train=replace(a.train, lr=1.0))
    )
    # what the run computes changes the id
    assert run_id(replace(a, precision=PrecisionConfig(w="fp8_e4m3"))) != run_id(a)
    assert run_id(replace(a, precision=PrecisionConfig(a="bf16"))) != run_id(a)
    assert run_id(replace(a, train=replace(a.train, seed=1))) != run_id(a)
    assert run_id(replace(a, model=ProxyConfig(depth=3, width=16))) != run_id(a)
    # a branch is identified by its parent's directory name, not where the sweep lives
    b1 = replace(a, train=replace(a.train, branch_from="/a/sweep/parent_1234abcd", branch_step=5))
    b2 = replace(a, train=replace(a.train, branch_from="/moved/parent_1234abcd/", branch_step=5))
    assert run_id(b1) == run_id(b2) != run_id(a)


# ---------------------------------------------------------------------------------------- skip logic


def _planned(tmp_path: Path, name: str) -> PlannedRun:
    run = replace(_run(), out_dir=str(tmp_path / name))
    return PlannedRun(run, run_id(run), name, {}, [])


def _record(run_dir: Path, status: str) -> None:
    run_dir.mkdir(parents=True)
    (run_dir / "summary.json").write_text(json.dumps({"status": status, "step": 3, "steps": 10}))


def test_skip_logic_and_statuses(tmp_path):
    names = ["done", "diverged", "failed", "interrupted", "running", "pending", "killed"]
    for s in ("done", "diverged", "failed", "interrupted"):
        _record(tmp_path / s, s)
    (tmp_path / "running").mkdir()
    (tmp_path / "running/running.json").write_text(
        json.dumps({"host": os.uname().nodename, "pid": os.getpid()})
    )
    (tmp_path / "killed").mkdir()
    (tmp_path / "killed/metrics.jsonl").write_text('{"step": 2}\n')
    (tmp_path / "pending").mkdir()
    assert [run_status(tmp_path / n) for n in names] == [*names[:6], "interrupted"]
    runs = [_planned(tmp_path, n) for n in names]
    launched = {r: [d.planned.name for d in decide(runs, r) if d.launch] for r in ("none", "failed", "all")}
    assert launched["none"] == ["interrupted", "pending", "killed"]
    assert launched["failed"] == ["failed", "interrupted", "pending", "killed"]
    assert launched["all"] == [
        "done",
        "diverged",
        "failed",
        "interrupted",
        "pending",
        "killed",
    ]  # never a live one
    # a stale marker (dead pid on this host) is not running
    (tmp_path / "running/running.json").write_text(
        json.dumps({"host": os.uname().nodename, "pid": 2**22 + 7})
    )
    assert run_status(tmp_path / "running") == "interrupted"


# ----------------------------------------------------------------------------------- dry run, errors


def test_dry_run_prints_the_table_and_writes_nothing(tmp_path):
    sweep_dir = tmp_path / "sw"
    r = sweep(sweep_dir, "sweep.dry_run=true")
    assert r.returncode == 0, r.stderr
    header = r.stdout.splitlines()[0].split()
    for col in ("precision", "C", "d", "L", "N", "D", "D/N", "steps", "cost", "time", "status", "run"):
        assert col in header
    assert "4 runs asked, 0 skipped, 4 to launch" in r.stdout
    assert re.search(r"^\s*0\s+1\s+bf16\s+3e8\s+32\s+1\s+28832\s+1664\s+0\.0577\s+13\s", r.stdout, re.M)
    assert not sweep_dir.exists()  # no manifest, no run directory, no job


def test_paper_llm_dry_run_plans_all_25_pairs(tmp_path):
    tic = time.perf_counter()
    r = launch(
        "-m", "experiment=paper_llm", "sweep.dry_run=true", f"hydra.sweep.dir={tmp_path / 'p'}", *QUIET
    )
    wall = time.perf_counter() - tic
    assert r.returncode == 0, r.stderr
    assert "2375 runs asked" in r.stdout  # 25 W×A pairs × 95 (budget, shape) pairs
    planned = float(re.search(r"planned and previewed in ([0-9.]+) s", r.stdout).group(1))
    # Its time is printed, not asserted: a wall-clock target fails on a busy machine (3.15 s against a
    # 3 s bound while a sweep shared the 2 cores), and targets belong in benchmarks/.
    print(f"paper_llm dry run: {planned:.2f} s in the sweeper, {wall:.2f} s for the whole command")
    rows = [line.split() for line in r.stdout.splitlines() if re.match(r"\s*\d+\s+1\s", line)]
    assert len(rows) == 2375 and len({row[2] for row in rows}) == 25
    assert not (tmp_path / "p").exists()


@pytest.mark.parametrize(
    ("overrides", "named"),
    [
        (["sweep.precisions=[{name:x,w:fp8_e4m3,nrm_affine:bf16}]"], "sweep.precisions[0] has unknown field"),
        (["train.lrr=0.1,0.2"], "train.lrr is not a config key"),  # a swept key: Hydra's sweep parser
        (["sweep.resources=[{max_params:null}]"], "sweep.resources[0].launcher=None"),
    ],
)
def test_bad_input_is_one_line_and_launches_nothing(tmp_path, overrides, named):
    """End to end on a sample: one line on stderr, exit 2, no sweep directory."""
    r = sweep(tmp_path / "sw", *overrides)
    lines = r.stderr.strip().splitlines()
    assert r.returncode == 2 and len(lines) == 1, r.stderr
    assert lines[0].startswith("error: ") and named in lines[0], lines[0]
    assert not (tmp_path / "sw").exists()


# ------------------------------------------------------------------------------------- whole sweeps


@pytest.fixture(scope="module")
def smoke(tmp_path_factory):
    """The smoke sweep run once through the basic launcher, then relaunched."""
    sweep_dir = tmp_path_factory.mktemp("smoke") / "sw"
    first = sweep(sweep_dir)
    second = sweep(sweep_dir)
    return sweep_dir, first, second


def test_smoke_sweep_runs_and_a_relaunch_launches_nothing(smoke):
    sweep_dir, first, second = smoke
    assert first.returncode == 0, first.stderr
    runs = sorted(p for p in sweep_dir.iterdir() if p.is_dir() and not p.name.startswith("."))
    assert len(runs) == 4
    for run_dir in runs:
        summary = json.loads((run_dir / "summary.json").read_text())
        assert summary["status"] == "done"
        # the directory name ends in the identity of the config the job actually ran
        config = OmegaConf.to_container(OmegaConf.load(run_dir / "config.yaml"))
        assert run_dir.name.endswith("_" + run_id(config))
        assert re.fullmatch(r"(bf16|mxfp8)_C3e8_d32L[12]_s0_[0-9a-f]{8}", run_dir.name)
    assert second.returncode == 0, second.stderr
    assert "4 runs asked, 4 skipped, 0 to launch" in second.stdout
    assert "Launching" not in second.stdout + second.stderr


def test_manifest_records_asked_skipped_launched(smoke):
    sweep_dir, _, _ = smoke
    m = json.loads((sweep_dir / "manifest.json").read_text())  # the relaunch's
    assert m["counts"] == {"asked": 4, "skipped": 4, "launched": 0}
    assert set(m["skipped"].values()) == {"done"} and len(m["asked"]) == 4 and m["launched"] == []
    run = m["runs"][0]
    assert {"id", "name", "phase", "action", "status_before", "status_after", "coords", "overrides"} <= set(
        run
    )
    assert run["name"].endswith(run["id"]) and any(o.startswith("out_dir=") for o in run["overrides"])


def test_status_counts_and_table(smoke):
    sweep_dir, _, _ = smoke
    for cmd in (["launch.py", "--status"], ["-m", "sweeper.status"]):
        r = subprocess.run(
            [sys.executable, *cmd, str(sweep_dir)], cwd=REPO, env=child_env(), capture_output=True, text=True
        )
        assert r.returncode == 0, r.stderr
        assert "4 runs: done 4, diverged 0, failed 0, interrupted 0, running 0, pending 0" in r.stdout
        assert (
            len([line for line in r.stdout.splitlines() if re.match(r"\S+_[0-9a-f]{8}\s+done ", line)]) == 4
        )
    r = launch("--status", str(sweep_dir / "nope"))
    assert r.returncode == 2 and r.stderr.startswith("error:")
    summary = json.loads(next(sweep_dir.glob("*/summary.json")).read_text())
    shown = f"{summary['final_val_loss']:.4g}"  # 4 significant digits: precisions differ by 0.003–0.02
    assert shown in launch("--status", str(sweep_dir)).stdout
    assert num_loss(0.0123456) == "0.01235" and num_loss(2.71828) == "2.718" and num_loss(None) == "-"


def test_status_of_a_run_directory_does_not_list_hydra_files(tmp_path):
    run = tmp_path / "run"
    (run / ".hydra").mkdir(parents=True)
    (run / ".hydra" / "config.yaml").write_text("a: 1\n")
    (run / "config.yaml").write_text("a: 1\n")
    names = [r["name"] for r in scan(run)]
    assert ".hydra" not in names


def test_help_names_mxsweeps_commands():
    r = launch("--help")
    assert r.returncode == 0
    for text in ("--status", "-m experiment=", "sweep.dry_run=true", "python -m analysis results"):
        assert text in r.stdout, text


def test_rerun_failed(tmp_path, smoke):
    """A failed run is skipped by default and relaunched (resumed) with sweep.rerun=failed."""
    import shutil

    sweep_dir = tmp_path / "sw"
    shutil.copytree(smoke[0], sweep_dir)
    victim = sorted(p for p in sweep_dir.iterdir() if p.is_dir() and p.name.startswith("mxfp8"))[0]
    summary = json.loads((victim / "summary.json").read_text())
    (victim / "summary.json").write_text(json.dumps({**summary, "status": "failed", "error": "boom"}))
    for p in sweep_dir.iterdir():  # the copied records point at the old directories
        if (p / "config.yaml").exists():
            text = (p / "config.yaml").read_text().replace(str(smoke[0]), str(sweep_dir))
            (p / "config.yaml").write_text(text)
    assert counts(scan(sweep_dir))["failed"] == 1
    r = sweep(sweep_dir)
    assert r.returncode == 0, r.stderr
    assert "4 runs asked, 4 skipped, 0 to launch" in r.stdout
    r = sweep(sweep_dir, "sweep.rerun=failed")
    assert r.returncode == 0, r.stderr
    assert "4 runs asked, 3 skipped, 1 to launch" in r.stdout
    m = json.loads((sweep_dir / "manifest.json").read_text())
    assert (
        m["launched"] == [victim.name]
        and m["runs"][[x["name"] for x in m["runs"]].index(victim.name)]["status_after"] == "done"
    )


@pytest.mark.skipif(__import__("torch").cuda.is_available(), reason="needs a machine without CUDA")
def test_failed_jobs_are_reported_and_the_sweep_exits_nonzero(tmp_path):
    r = sweep(tmp_path / "sw", "train.device=cuda")  # valid config, fails at the start of every job
    assert r.returncode != 0
    assert r.stderr.count("no CUDA device is available") == 4  # the error column, one row per run
    assert r.stderr.strip().splitlines()[-1].startswith("error: 4 of 4 launched runs did not finish")
    manifest = json.loads((tmp_path / "sw/manifest.json").read_text())
    assert manifest["counts"]["launched"] == 4


def test_job_refuses_a_config_that_does_not_match_its_planned_id(tmp_path):
    r = launch(*QUIET, "task=proxy", "model.width=8", "model.depth=1", "train.steps=2",
               f"out_dir={tmp_path / 'x'}", "sweep.run_id=deadbeef")  # fmt: skip
    assert r.returncode == 2 and "sweep planned deadbeef" in r.stderr
    assert not (tmp_path / "x/summary.json").exists()


def test_finished_run_is_a_no_op_job(tmp_path):
    args = [
        "logger=disabled",  # a single run: sweep.* keys (sweep.progress) would be refused without -m
        "task=proxy",
        "model.width=8",
        "model.depth=1",
        "train.steps=3",
        f"out_dir={tmp_path / 'x'}",
    ]
    assert launch(*args).returncode == 0
    before = (tmp_path / "x/summary.json").read_text()
    r = launch(*args)
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "x/summary.json").read_text() == before and '"status": "done"' in r.stdout


def test_submitit_local_sweep_lands_every_record(tmp_path, smoke):
    sweep_dir = tmp_path / "sub"
    r = sweep(sweep_dir, "hydra/launcher=submitit_local")
    assert r.returncode == 0, r.stderr
    names = sorted(p.name for p in sweep_dir.iterdir() if (p / "summary.json").exists())
    assert names == sorted(p.name for p in smoke[0].iterdir() if (p / "summary.json").exists())  # same ids
    assert all(json.loads((sweep_dir / n / "summary.json").read_text())["status"] == "done" for n in names)
    assert (sweep_dir / ".submitit").is_dir()
    # no sweep.resources: one launcher call, every job with the launcher's own parameters, in plan order
    submitted = _submitted(sweep_dir)
    assert {s["timeout_min"] for s in submitted.values()} == {60}  # submitit_local's default
    m = json.loads((sweep_dir / "manifest.json").read_text())
    assert [(r["job"], r["resources"]) for r in m["runs"]] == [(i, None) for i in range(4)]
    assert {r["name"]: r["job"] for r in m["runs"]} == {n: s["job"] for n, s in submitted.items()}


def _submitted(sweep_dir: Path) -> dict[str, dict]:
    """run name → the launcher parameters and Hydra job number each submitit job was submitted with
    (read back from submitit's pickled submission: the launcher instance and its arguments)."""
    import pickle

    out = {}
    for path in (sweep_dir / ".submitit").glob("*/*_submitted.pkl"):
        with path.open("rb") as f:
            delayed = pickle.load(f)
        (out_dir,) = [o.split("=", 1)[1] for o in delayed.args[0] if o.startswith("out_dir=")]
        out[Path(out_dir).name] = {**delayed.function.params, "job": delayed.args[2]}
    return out


def test_resources_by_run_size(tmp_path):
    """sweep.resources: the small shape (N = 28,832) and the large one each get their rule's launcher
    parameters, launched as one group per rule; the basic launcher ignores the rules (says so once).
    One precision: the rules go by shape, and each submitit job is a process that imports torch."""
    rules = (
        "sweep.resources=[{max_params:3e4,launcher:{timeout_min:7}},"
        "{max_params:null,launcher:{timeout_min:9}}]"
    )
    sweep_dir = tmp_path / "res"
    one = "sweep.precisions=[{name:bf16,precision:bf16}]"
    r = sweep(sweep_dir, "hydra/launcher=submitit_local", rules, one)
    assert r.returncode == 0, r.stderr
    submitted = _submitted(sweep_dir)
    m = json.loads((sweep_dir / "manifest.json").read_text())
    assert len(submitted) == 2 and m["counts"]["launched"] == 2
    for run in m["runs"]:
        small = run["coords"]["N"] <= 3e4
        assert ("_d32L1_" in run["name"]) == small
        assert submitted[run["name"]]["timeout_min"] == (7 if small else 9)
        assert run["resources"] == {"timeout_min": 7 if small else 9}
        assert submitted[run["name"]]["job"] == run["job"]  # the manifest's job numbers are Hydra's
    # the small group is launched first: job 0 is the small run, 1 the large one
    assert [r["job"] for r in sorted(m["runs"], key=lambda r: r["coords"]["N"])] == [0, 1]
    assert all(
        json.loads((sweep_dir / n / "summary.json").read_text())["status"] == "done" for n in submitted
    )
    # no rule covers a run: a one-line error; an unknown launcher key: the same
    for bad, named in (
        ("sweep.resources=[{max_params:3e4,launcher:{timeout_min:7}}]", "no rule has max_params >= N="),
        ("sweep.resources=[{max_params:null,launcher:{timeout_mn:7}}]", "resources[0].launcher has unknown"),
    ):
        r = sweep(tmp_path / "bad", "hydra/launcher=submitit_local", "sweep.dry_run=true", bad)
        lines = r.stderr.strip().splitlines()
        assert r.returncode == 2 and len(lines) == 1 and named in lines[0], r.stderr
    r = sweep(tmp_path / "basic", "sweep.dry_run=true", rules)
    assert r.returncode == 0, r.stderr
    assert r.stderr.count("sweep.resources ignored") == 1


def _metrics(run_dir: Path) -> list[dict]:
    """The logged metrics without the wall-clock timings (which differ run to run)."""
    return [{k: v for k, v in row.items() if k not in record.TIMINGS} for row in record.read_metrics(run_dir)]


@pytest.mark.slow
def test_preempted_submitit_job_is_requeued_and_resumes_bit_identical(tmp_path):
    """USR2 (submitit's preemption / time-out signal) mid-run: the job checkpoints, submitit requeues it
    through the launcher's checkpoint() and the resumed run ends exactly as an uninterrupted one."""
    one = [
        "sweep.precisions=[{name:mxfp8,w:fp8_e4m3,a:fp8_e4m3}]",
        "budget.ladder=[{depth:1,d_model:32,n_heads:2}]",
        "budget.flops=[5e9]",
    ]  # fmt: skip  (225 steps)
    cmd = ["launch.py", "-m", "experiment=smoke", f"hydra.sweep.dir={tmp_path / 'rq'}", *QUIET, *one]
    proc = subprocess.Popen(
        [sys.executable, *cmd, "hydra/launcher=submitit_local"],
        cwd=REPO,
        env=child_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline, sent = time.time() + 240, False
    while time.time() < deadline and not sent:
        time.sleep(0.5)
        for marker in (tmp_path / "rq").glob("*/running.json"):
            metrics = marker.parent / "metrics.jsonl"
            if metrics.exists() and metrics.read_text().count("\n") >= 20:
                os.kill(json.loads(marker.read_text())["pid"], signal.SIGUSR2)
                sent = True
    out, err = proc.communicate(timeout=300)
    assert sent and proc.returncode == 0, err
    (run_dir,) = [p for p in (tmp_path / "rq").iterdir() if (p / "summary.json").exists()]
    logs = "".join(p.read_text() for p in (tmp_path / "rq/.submitit").glob("*/*_log.*"))
    assert "Requeued job" in logs
    assert json.loads((run_dir / "summary.json").read_text())["status"] == "done"
    ref = sweep(tmp_path / "ref", *one)  # the same run, uninterrupted, basic launcher
    assert ref.returncode == 0, ref.stderr
    assert _metrics(run_dir) == _metrics(tmp_path / "ref" / run_dir.name)


def test_a_relaunch_with_other_seeds_keeps_the_earlier_runs_in_the_manifest(tmp_path):
    """Issue 11, defect 10: relaunching a sweep with another seed used to overwrite manifest.json, so
    --status and the analysis lost the earlier runs' precision, budget and shape."""
    from analysis.collect import collect
    from sweeper.status import scan

    one = [
        "sweep.precisions=[{name:mxfp8,w:fp8_e4m3,a:fp8_e4m3}]",
        "budget.ladder=[{depth:1,d_model:32,n_heads:2}]",
        "budget.flops=[1e9]",
    ]  # fmt: skip
    for seed in (0, 1):
        r = sweep(tmp_path / "s", *one, f"sweep.seeds=[{seed}]")
        assert r.returncode == 0, r.stderr
    manifest = json.loads((tmp_path / "s" / "manifest.json").read_text())
    assert (
        manifest["counts"]["asked"] == 1 and len(manifest["earlier"]) == 1
    )  # this launch, and the one before
    rows = scan(tmp_path / "s")
    assert len(rows) == 2 and {r.get("precision") for r in rows} == {"mxfp8"}
    assert sorted(r["seed"] for r in rows) == [0, 1]
    df = collect(tmp_path / "s")
    assert sorted(df["sweep.precision"]) == ["mxfp8", "mxfp8"] and df["sweep.C"].notna().all()
    r = sweep(tmp_path / "s", *one, "sweep.seeds=[1]")  # the same launch again: nothing duplicated
    assert r.returncode == 0, r.stderr
    manifest = json.loads((tmp_path / "s" / "manifest.json").read_text())
    assert [x["coords"]["seed"] for x in manifest["earlier"]] == [0]


def test_a_job_that_raises_before_training_is_recorded_failed_not_retried_forever(tmp_path):
    """Issue 11, defect 5: a job that raised before training wrote no record, read as pending and was
    relaunched every time. Now it is failed with its error; sweep.rerun=failed retries it."""
    one = [
        "sweep.precisions=[{name:mxfp8,w:fp8_e4m3,a:fp8_e4m3}]",
        "budget.ladder=[{depth:1,d_model:32,n_heads:2}]",
        "budget.flops=[1e9]",
        "train.device=cuda",  # planned anywhere (a login node has no GPU); the job itself refuses
    ]  # fmt: skip
    r = sweep(tmp_path / "s", *one)
    assert r.returncode == 2 and "did not finish" in r.stderr
    (summary,) = [json.loads(p.read_text()) for p in (tmp_path / "s").glob("*/summary.json")]
    assert summary["status"] == "failed" and "cuda" in summary["error"].lower()
    r = sweep(tmp_path / "s", *one)
    assert r.returncode == 0 and "1 runs asked, 1 skipped, 0 to launch" in r.stdout, r.stdout + r.stderr
    r = sweep(tmp_path / "s", *one, "sweep.rerun=failed")
    assert "1 runs asked, 0 skipped, 1 to launch" in r.stdout, r.stdout + r.stderr


# -- Hydra-native sweeping (issue 12) ----------------------------------------------------------------
TINY_PROXY_RUN = ["task=proxy", "model.width=8", "model.depth=1", "train.steps=2", "logger=disabled"]


def _launch_in(cwd: Path, *args: str) -> subprocess.CompletedProcess:
    """``python <repo>/launch.py *args`` from ``cwd``: default output paths land under ``cwd``."""
    return subprocess.run([sys.executable, str(REPO / "launch.py"), *args], cwd=cwd, env=child_env(),
                          capture_output=True, text=True, timeout=600)  # fmt: skip


def test_ad_hoc_sweeps_never_share_a_directory(tmp_path):
    """Two unnamed `-m key=a,b` sweeps used to land in outputs/sweeps/multirun, the second overwriting
    the first's manifest; each now gets multirun-<launch time>."""
    args = ["-m", *TINY_PROXY_RUN, "train.lr=1e-3,3e-3", "sweep.progress=false"]
    first = _launch_in(tmp_path, *args)
    assert first.returncode == 0, first.stderr
    time.sleep(1.1)  # the directory's name has one-second resolution
    second = _launch_in(tmp_path, *args)
    assert second.returncode == 0, second.stderr
    dirs = sorted((tmp_path / "outputs" / "sweeps").iterdir())
    assert len(dirs) == 2 and all(d.name.startswith("multirun-") for d in dirs), dirs
    for d in dirs:
        manifest = json.loads((d / "manifest.json").read_text())
        assert manifest["counts"]["launched"] == 2 and manifest["name"] == d.name


def test_the_basic_sweeper_gives_each_job_its_own_run_directory(tmp_path):
    """hydra/sweeper=basic with two values crashed: both jobs wrote one outputs/runs/<task>-<time>."""
    r = _launch_in(tmp_path, "-m", "hydra/sweeper=basic", *TINY_PROXY_RUN, "train.lr=1e-3,3e-3")
    assert r.returncode == 0, r.stderr[-2000:]
    (sweep_dir,) = (tmp_path / "outputs" / "sweeps").iterdir()
    lrs = {json.loads((sweep_dir / job / "summary.json").read_text())["status"] for job in ("0", "1")}
    assert lrs == {"done"} and not (tmp_path / "outputs" / "runs").exists()
    configs = [OmegaConf.load(sweep_dir / job / "config.yaml") for job in ("0", "1")]
    assert sorted(c.train.lr for c in configs) == [1e-3, 3e-3]


def test_a_command_line_value_narrows_a_preset_axis(tmp_path):
    """`-m experiment=proxy_lr_sweep model.depth=4` failed with "two runs of this sweep have the same
    training config"; the preset's depth axis is now replaced by the command line's value."""
    r = launch("-m", "experiment=proxy_lr_sweep", "model.depth=4", "train.lr=1e-3,3e-3", "sweep.dry_run=true",
               f"hydra.sweep.dir={tmp_path}", "logger=disabled")  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert "16 runs asked" in r.stdout  # 4 precisions × 2 widths × 2 LRs (× 1 depth)
    rows = [line for line in r.stdout.splitlines() if "pending" in line]
    assert len(rows) == 16 and all(" 4 " in row for row in rows)
    gone = launch("-m", "experiment=proxy_lr_sweep", "hydra.sweeper.params=null", "sweep.dry_run=true",
                  f"hydra.sweep.dir={tmp_path}", "logger=disabled")  # fmt: skip
    assert gone.returncode == 0 and "4 runs asked" in gone.stdout, gone.stderr
    assert not any(tmp_path.iterdir())  # a dry run writes nothing


def test_a_local_sweep_prints_one_line_per_run_and_no_banners(tmp_path):
    """A 4-run local sweep with the wandb logger used to print 148 lines (Hydra's override line per job,
    ~32 wandb lines per run, each job's JSON): now its header, one line per run, the bar and the
    counts. wandb still records every run."""
    r = launch("-m", "experiment=smoke", f"hydra.sweep.dir={tmp_path}", "logger=offline")
    assert r.returncode == 0, r.stderr[-2000:]
    out = r.stdout + r.stderr
    lines = [line for line in out.replace("\r", "\n").splitlines() if line.strip() and "runs:" not in line]
    assert len(lines) <= 15, out
    assert "wandb:" not in out and "[HYDRA]" not in out and '{"status"' not in out, out
    runs = sorted(p for p in tmp_path.iterdir() if (p / "summary.json").exists())
    assert len(runs) == 4
    for run in runs:
        assert sum(run.name in line and line.startswith("done") for line in lines) == 1, (run.name, lines)
        assert list((run / "wandb").glob("offline-run-*")), "wandb must still record the run"


def test_sweep_precisions_name_options_of_the_precision_group(tmp_path):
    """A preset names conf/precision/ options instead of repeating their fields; an entry's own fields
    win over its option's, and the run identity is the same as with the fields written out."""
    inline = ["sweep.precisions=[{name:h,w:fp8_e4m3,a:bf16,block_size:16},{name:f,w:fp8_e4m3,a:fp8_e4m3,"
              "quantize_backward:false}]"]  # fmt: skip
    named = ["sweep.precisions=[{name:h,precision:e4m3w_bf16a,block_size:16},{name:f,precision:mxfp8_fwd}]"]
    ids = []
    for precisions in (inline, named):
        r = sweep(tmp_path / "s", *precisions, "sweep.dry_run=true")
        assert r.returncode == 0, r.stderr
        ids.append(sorted(re.findall(r"_([0-9a-f]{8})$", r.stdout, re.M)))
    assert len(ids[0]) == 4 and ids[0] == ids[1]
    bad = sweep(tmp_path / "s", "sweep.precisions=[{name:x,precision:mxfp9}]", "sweep.dry_run=true")
    assert bad.returncode == 2 and "sweep.precisions[0].precision=mxfp9" in bad.stderr
    assert len(bad.stderr.strip().splitlines()) == 1 and not (tmp_path / "s").exists()
