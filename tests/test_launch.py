"""launch.py end to end: Hydra configs → typed RunConfig → one training run → a run record."""

import json
import subprocess
import sys

import pytest
import torch
from launching import REPO, child_env, launch


def _launch(*overrides: str) -> subprocess.CompletedProcess:
    return launch("logger=disabled", *overrides, timeout=300)


def test_proxy_run_writes_a_complete_record(tmp_path):
    out = tmp_path / "proxy"
    r = _launch(
        "task=proxy", "model.width=32", "model.depth=2", "train.steps=12", "train.eval_every=6",
        "train.twin_every=3", "precision.w=fp8_e4m3", "precision.a=fp8_e4m3", f"out_dir={out}",
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    summary = json.loads((out / "summary.json").read_text())
    assert summary["status"] == "done" and summary["steps"] == 12
    lines = [json.loads(s) for s in (out / "metrics.jsonl").read_text().splitlines()]
    assert 0 < lines[-1]["twin_cos"] <= 1 + 1e-6  # the fp32 twin ran alongside
    assert "w: fp8_e4m3" in (out / "config.yaml").read_text()


def test_lm_run_on_synthetic_data(tmp_path):
    out = tmp_path / "lm"
    r = _launch(
        "data.source=synthetic", "data.seq_len=32", "model.depth=1", "train.steps=8", "train.batch_size=4",
        "train.eval_every=4", "precision.w=fp8_e4m3", "precision.a=bf16", f"out_dir={out}",
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    summary = json.loads((out / "summary.json").read_text())
    assert summary["status"] == "done"
    assert summary["final_val_loss"] < 5.6  # below uniform over 256 bytes (ln 256 ≈ 5.55) + margin


@pytest.mark.parametrize(
    ("override", "field"),
    [  # one per path to the refusal; tests/test_bad_input.py has all 56 variants in both modes, in-process
        ("precision.w=fp9_e4m3", "precision.w"),  # a precision field
        ("train.lr=inf", "train.lr"),  # issue 11: trained (exit 0) before
        ("+nonsense_key=1", "nonsense_key"),  # Hydra's composition, issue 11: left out_dir/.hydra behind
        ("precision.w=nvfp4 precision.block_size=8", "precision.block_size"),  # a recipe's fixed field
        ("budget.flops=[0]", "budget.flops"),  # a sweep key without -m
        ("out_dir=/proc/no/such/run", "/proc/no"),  # cannot be created
    ],
)
def test_bad_input_is_one_line_and_nonzero_before_any_work(tmp_path, override, field):
    out = tmp_path / "bad"
    r = _launch("task=proxy", f"out_dir={out}", *override.split())
    assert r.returncode == 2
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and field in lines[0], r.stderr
    assert not out.exists() and not tmp_path.joinpath("bad").exists()  # nothing written, not even .hydra


@pytest.mark.parametrize(
    ("override", "field"),
    [("train.lr=inf", "train.lr")],  # the sweep's in-process checks: tests/test_bad_input.py
)
def test_bad_input_to_a_sweep_is_one_line_before_any_run(tmp_path, override, field):
    r = launch("-m", "experiment=smoke", "logger=disabled", override, f"hydra.sweep.dir={tmp_path / 's'}")
    lines = r.stderr.strip().splitlines()
    assert r.returncode == 2 and len(lines) == 1 and field in lines[0], r.stderr
    assert not (tmp_path / "s").exists()


_IMPORTS_TORCH = """
import json, runpy, sys
sys.argv = ["launch.py", *json.loads(sys.argv[1])]
try:
    runpy.run_path("launch.py", run_name="__main__")
except SystemExit as e:
    code = e.code
else:
    code = 0
print(json.dumps({"code": code, "torch": "torch" in sys.modules}))
"""


@pytest.mark.parametrize(
    ("args", "code"),
    [
        (["-m", "experiment=proxy_mechanism", "sweep.dry_run=true"], 0),  # plans and previews 16 runs
        (["logger=disabled", "task=proxy", "precision.w=fp9_e4m3"], 2),  # bad input, caught by QuantPolicy
        (["--status", "outputs/sweeps/no_such_sweep"], 2),
    ],
)
def test_planning_and_refusing_never_import_torch(tmp_path, args, code):
    """Commands that train nothing (a dry run, bad input, --status) answer without importing torch
    (2–3 s of a 3.5 s start): configs, the format table, policies and the task registry are torch-free."""
    where = [f"hydra.sweep.dir={tmp_path / 's'}"] if "-m" in args else [f"out_dir={tmp_path / 'r'}"]
    args = args if args[0] == "--status" else [*args, *where]
    r = subprocess.run([sys.executable, "-c", _IMPORTS_TORCH, json.dumps(args)], cwd=REPO, env=child_env(),
                       capture_output=True, text=True, timeout=120)  # fmt: skip
    result = json.loads(r.stdout.strip().splitlines()[-1])
    assert result == {"code": code, "torch": False}, r.stderr[-2000:]


def test_unknown_key_is_rejected(tmp_path):
    r = _launch("task=proxy", "train.stpes=5", f"out_dir={tmp_path / 'x'}")
    assert r.returncode != 0
    assert "stpes" in r.stderr


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the message for machines without a GPU")
def test_cuda_without_gpu_is_one_line(tmp_path):
    r = _launch("task=proxy", "train.device=cuda", f"out_dir={tmp_path / 'gpu'}")
    assert r.returncode == 2
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "train.device" in lines[0] and "no CUDA device" in lines[0], r.stderr


def test_a_finished_run_of_another_config_is_one_line_and_overwrite_true_replaces_it(tmp_path):
    """Issue 11, defect 9: a 36-line traceback whose hint (overwrite=True) did not work from the CLI."""
    out = tmp_path / "run"
    base = ["task=proxy", "model.width=16", "model.depth=1", "train.steps=4", "train.eval_every=2",
            f"out_dir={out}"]  # fmt: skip
    assert _launch(*base).returncode == 0
    before = (out / "summary.json").read_text()
    r = _launch(*base, "train.lr=0.01")
    lines = r.stderr.strip().splitlines()
    assert r.returncode == 2 and len(lines) == 1 and "finished run of another config" in lines[0], r.stderr
    assert "overwrite=true" in lines[0] and (out / "summary.json").read_text() == before
    r = _launch(*base, "train.lr=0.01", "overwrite=true")
    assert r.returncode == 0, r.stderr
    assert "lr: 0.01" in (out / "config.yaml").read_text()
    r = _launch(*base, "train.lr=0.01", "overwrite=true")  # a finished run of the same config: redone
    assert r.returncode == 0 and json.loads((out / "summary.json").read_text())["status"] == "done"


def _wait_for_steps(path, n, proc, deadline):
    import time

    while time.time() < deadline and proc.poll() is None:
        if path.exists() and path.read_text().count("\n") >= n:
            return True
        time.sleep(0.2)
    return False


def test_ctrl_c_checkpoints_at_the_next_step_and_exits_with_one_line(tmp_path):
    """Issue 11, defect 7: Ctrl-C printed a 40-line traceback, wrote no checkpoint, and the relaunch
    started over. Now it checkpoints at the next step boundary, says so, exits 130, and resumes."""
    import signal
    import subprocess
    import sys
    import time

    from launching import REPO, child_env

    out = tmp_path / "run"
    args = ["task=proxy", "model.width=32", "model.depth=2", "train.steps=800", "train.eval_every=400",
            "train.log_every=1", "train.ckpt_every=0", "logger=disabled", "logger.console_every_s=0",
            f"out_dir={out}"]  # fmt: skip
    proc = subprocess.Popen([sys.executable, "launch.py", *args], cwd=REPO, env=child_env(),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)  # fmt: skip
    assert _wait_for_steps(out / "metrics.jsonl", 20, proc, time.time() + 120)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    lines = err.strip().splitlines()
    assert proc.returncode == 130 and "Traceback" not in err, err
    assert lines[0] == f"run: {out}" and len(lines) <= 3, err  # the directory, Ctrl-C's notice, the end
    assert lines[-1].startswith("interrupted (") and "relaunch" in lines[-1], err
    summary = json.loads((out / "summary.json").read_text())
    assert summary["status"] == "interrupted" and (out / "ckpt").is_dir()
    step = summary["step"]
    assert step >= 20 and f"step_{step:08d}.pt" in {p.name for p in (out / "ckpt").iterdir()}
    r = _launch(*args)
    assert r.returncode == 0, r.stderr
    rows = [json.loads(s)["step"] for s in (out / "metrics.jsonl").read_text().splitlines()]
    assert rows == list(range(1, 801))  # resumed from the Ctrl-C checkpoint, no step twice


def test_a_single_run_prints_its_directory_first_then_progress_lines(tmp_path):
    """Issue 12: a single run printed nothing for ~23 s, then one JSON line."""
    import re

    out = tmp_path / "run"
    r = _launch("task=proxy", "model.width=16", "model.depth=1", "train.steps=300", "train.eval_every=100",
                "logger.console_every_s=0.01", f"out_dir={out}")  # fmt: skip
    assert r.returncode == 0, r.stderr
    lines = r.stderr.strip().splitlines()
    assert lines[0] == f"run: {out}"
    progress = [x for x in lines if x.startswith("step ")]
    assert len(progress) >= 3 and progress[-1].startswith("step 300/300 | loss ")
    assert re.search(r"\| val [0-9.e-]+ \| lr [0-9.e+-]+ \| [0-9.]+k? tok/s \| ETA \d+:\d\d$", progress[-1])
    r = _launch("task=proxy", "model.width=16", "model.depth=1", "train.steps=300", "train.eval_every=100",
                "logger.console_every_s=0", f"out_dir={tmp_path / 'quiet'}")  # fmt: skip
    assert r.returncode == 0 and not [x for x in r.stderr.splitlines() if x.startswith("step ")]
