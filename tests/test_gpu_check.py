"""benchmarks/gpu_check.py (scripts/gpu_check.sh), the GPU validation: on a machine without CUDA it
says so in one line, writes both files with status no_gpu and exits 3; its pure helpers (verdicts,
bandwidth, JUnit and run-record parsing, the Markdown summary through analysis.report.md_table);
time boxes; and its check functions on CPU with tiny sizes, so the code the GPU runs is exercised
here too (against itself: CPU vs CPU), including the key-numbers cells built from their results."""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import time

import pytest
import torch
from launching import REPO, child_env

sys.path.insert(0, str(REPO))
from benchmarks import gpu_check as gc  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the message for machines without a GPU")
def test_no_gpu_exits_3_and_writes_both_files(tmp_path):
    out = tmp_path / "check"
    r = subprocess.run(
        ["bash", "scripts/gpu_check.sh", "--out", str(out)],
        cwd=REPO,
        env=child_env(MXSWEEP_SKIP_SETUP="1"),  # the .venv is set up; no pip here
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == gc.NO_GPU_EXIT == 3, r.stderr[-2000:]
    assert r.stdout.splitlines()[0] == f"no_gpu: {gc.NO_GPU_MESSAGE}"
    assert "no CUDA GPU present: nothing was checked; run this on a machine with an NVIDIA GPU" in r.stdout
    result = json.loads((out / "gpu_check.json").read_text())
    assert result["status"] == "no_gpu" and result["exit_code"] == 3
    assert result["message"] == gc.NO_GPU_MESSAGE and result["detail"]
    assert [s["step"] for s in result["steps"]] == list(gc.STEPS)
    assert {s["status"] for s in result["steps"]} == {"skipped"}
    md = (out / "gpu_check.md").read_text()
    assert f"**no_gpu**: {gc.NO_GPU_MESSAGE}" in md
    assert "| step | status | key numbers | seconds |" in md and "| proxy | skipped |" in md
    assert not (out / "logs").exists()  # nothing was run


def test_bad_arguments_exit_2(capsys):
    bad = (
        ["--only", "bogus"],
        ["--timeout", "proxy=soon"],
        ["--timeout", "nope=3"],
        ["--proxy-backend", "c"],
    )
    for argv in bad:
        with pytest.raises(SystemExit) as e:
            gc.parse_args(argv)
        assert e.value.code == 2
    args = gc.parse_args(["--only", "speed,proxy", "--timeout", "proxy=60"])
    assert args.steps == ["speed", "proxy"] and args.timeouts == {"proxy": 60.0}
    assert (
        args.proxy_backend == "auto" and gc.parse_args(["--proxy-backend", "eager"]).proxy_backend == "eager"
    )


def test_bandwidth_and_verdicts():
    # 16384^2 fp32 read + written in 1 ms: 2 * 2**28 * 4 B / 1e-3 s
    assert gc.bandwidth_gbs(16384 * 16384, 4, 1e-3) == pytest.approx(2147.483648)
    assert gc.verdict(0.6, gc.QDQ_TARGET, at_least=True) == "pass"
    assert gc.verdict(0.59, gc.QDQ_TARGET, at_least=True) == "fail"
    assert gc.verdict(1.3, gc.LM_TARGET, at_least=False) == "pass"
    assert gc.verdict(1.31, gc.LM_TARGET, at_least=False) == "fail"
    assert gc.verdict(math.nan, 1.0, at_least=True) == gc.verdict(None, 1.0, at_least=False) == "fail"
    a = torch.tensor([1.0, float("nan"), -4.0])
    assert gc.max_rel_err(a, a) == 0.0
    assert gc.max_rel_err(a + torch.tensor([0.0, 0.0, 4e-4]), a) == pytest.approx(1e-4, rel=1e-3)


def _step(name, status, message="m", **numbers):
    return {"step": name, "status": status, "seconds": 1.0, "numbers": numbers, "message": message}


def test_overall_status_and_exit_code():
    passed = [_step("correctness", "pass"), _step("proxy", "incomplete", "timed out")]
    assert gc.overall(passed)[:2] == ("pass", 0) and "proxy incomplete: timed out" in gc.overall(passed)[2]
    failed = gc.overall([*passed, _step("speed", "fail", "missed: QDQ")])
    assert failed[:2] == ("fail", 1) and "speed (missed: QDQ)" in failed[2]
    assert gc.overall([_step("speed", "skipped")])[:2] == ("fail", 1)
    assert (
        json.dumps(gc.clean({"a": [math.nan, math.inf], "b": -math.inf}))
        == '{"a": ["nan", "inf"], "b": "-inf"}'
    )


def test_parse_junit(tmp_path):
    xml = tmp_path / "j.xml"
    xml.write_text(
        '<testsuites><testsuite name="pytest">'
        '<testcase classname="tests.test_device" name="test_cuda_bf16_autocast[fp32]" />'
        '<testcase classname="tests.test_device" name="test_cuda_bf16_autocast[hybrid]">'
        '<failure message="boom" /></testcase>'
        '<testcase classname="tests.test_launch" name="test_cuda_without_gpu_is_one_line">'
        '<skipped type="pytest.skip" message="checks the message" /></testcase>'
        "</testsuite></testsuites>"
    )
    got = gc.parse_junit(xml)
    assert got["passed"] == ["tests.test_device::test_cuda_bf16_autocast[fp32]"]
    assert got["failed"] == ["tests.test_device::test_cuda_bf16_autocast[hybrid]"]
    assert got["skipped"] == ["tests.test_launch::test_cuda_without_gpu_is_one_line (checks the message)"]
    numbers = {"pytest": {"exit_status": 1, **got}}
    status, msg = gc.correctness_verdict(numbers)
    assert status == "fail" and "test_cuda_bf16_autocast[hybrid]" in msg


def _write_run(d, summary, rows):
    d.mkdir(parents=True)
    (d / "config.yaml").write_text("train:\n  device: cuda\n")
    (d / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    if summary is not None:
        (d / "summary.json").write_text(json.dumps(summary))


def test_proxy_runs_and_near(tmp_path):
    rows = [
        {"step": s, "loss": 0.1, "clip_ln/blocks.0.norm": c, "clip_ln/blocks.1.norm": c / 2, "twin_cos": cos}
        for s, c, cos in ((4800, 0.5, 0.9), (4900, 1.0, 0.5), (5000, 0.8, float("nan")), (5400, 0.2, 0.1))
    ]
    summary = {"status": "diverged", "step": 5090, "steps": 9000, "spike_step": 4950, "diverged_step": 5090}
    summary |= {"final_val_loss": None, "twin_final_val_loss": 0.03, "median_step_time": 0.01}
    _write_run(tmp_path / "mx_ln_e4m3_d512L4_s1337_0123abcd", summary, rows)
    _write_run(tmp_path / "mx_ln_none_d512L4_s1337_89ef0123", None, rows[:2])  # killed before a summary
    (tmp_path / "manifest.json").write_text("{}")
    runs = gc.proxy_runs(tmp_path, window=100)
    assert list(runs) == ["mx_ln_e4m3", "mx_ln_none"]
    e4 = runs["mx_ln_e4m3"]
    assert (e4["status"], e4["spike_step"], e4["diverged_step"], e4["twin_final_val_loss"]) == (
        "diverged",
        4950,
        5090,
        0.03,
    )
    # near the spike (4950): last logged at or before it is step 4900; within 100 steps: 4900 and 5000
    assert e4["near"] == {
        "at_step": 4950,
        "clip_ln": 0.75,
        "clip_ln_max": 0.75,
        "twin_cos": 0.5,
        "twin_cos_min": 0.5,
    }
    none = runs["mx_ln_none"]
    assert none["status"] == "no summary" and none["step"] == 4900 and none["last_loss"] == 0.1
    key = gc.key_numbers({"step": "proxy", "numbers": {"runs": runs}})
    assert "mx_ln_e4m3: diverged at 5090/9000, spike 4950, diverged 5090, clip_ln 0.75" in key
    assert "mx_ln_none: no summary at 4900/-" in key


def test_markdown_uses_md_table(tmp_path):
    result = {
        "status": "fail",
        "message": "failed: speed (missed)",
        "started": "today",
        "environment": {"gpu": "NVIDIA H200", "capability": "90", "torch": "2.13.0", "cuda": "12.8"},
        "steps": [
            {**_step("correctness", "pass"), "key": "a | b"},
            {**_step("speed", "fail", "missed: QDQ"), "key": "QDQ/clone fp32: NVFP4 0.50"},
            _step("proxy", "skipped", "not selected (--only)"),
        ],
    }
    gc.write_outputs(tmp_path, result)
    md = (tmp_path / "gpu_check.md").read_text()
    assert "**fail**: failed: speed (missed)" in md and "NVIDIA H200, sm_90, torch 2.13.0, CUDA 12.8" in md
    assert "| correctness | pass | a \\| b | 1 |" in md  # md_table escapes the pipe
    assert "| proxy | skipped | not selected (--only) | 1 |" in md
    assert "* speed: missed: QDQ" in md and "* proxy" not in md
    assert json.loads((tmp_path / "gpu_check.json").read_text())["steps"][1]["status"] == "fail"
    assert not (tmp_path / gc.PROXY_SWEEP).exists()  # no proxy sweep, no copy
    (tmp_path / gc.PROXY_SWEEP).mkdir()
    gc.write_outputs(tmp_path, result)  # the canonical records carry the check that made them
    assert (tmp_path / gc.PROXY_SWEEP / "gpu_check.json").read_text() == (
        tmp_path / "gpu_check.json"
    ).read_text()


def test_time_box_kills_the_process_group(tmp_path):
    t0 = time.monotonic()
    with pytest.raises(gc.StepTimeout, match="timed out after 1 s"):
        gc.run_logged(["bash", "-c", "sleep 30 & sleep 30"], tmp_path / "sleep.log", 1.0, grace=2.0)
    assert time.monotonic() - t0 < 10
    assert gc.run_logged([sys.executable, "-c", "print('hi')"], tmp_path / "hi.log", 30) == 0
    assert gc.last_line(tmp_path / "hi.log") == "hi"


def test_step_wrapper_turns_exceptions_into_failures(tmp_path):
    ctx = gc.Ctx(tmp_path, argparse.Namespace())

    @gc.step("speed")
    def boom(ctx, box):
        raise ValueError("bad thing\nsecond line")

    @gc.step("correctness")
    def slow(ctx, box):
        raise gc.StepTimeout("timed out after 5 s", {"pytest": {"exit_status": 0}})

    res = boom(ctx, 5.0)
    assert res["status"] == "fail" and res["message"] == "ValueError: bad thing"
    assert (tmp_path / "logs" / "speed.traceback").exists()
    res = slow(ctx, 5.0)
    assert res["status"] == "fail" and res["numbers"] == {"pytest": {"exit_status": 0}}
    assert set(res) == {"step", "status", "seconds", "timeout_s", "numbers", "message", "key"}


def test_checks_on_cpu_tiny(monkeypatch):
    """The functions the GPU worker runs, here CPU vs CPU eager with tiny sizes: they run, agree, and
    their results feed the verdicts and the key-numbers cells."""
    grid = gc.quant_grid("cpu", shape=(8, 64), backends=("eager",))
    assert grid["ok"] and grid["cases"]["eager"] == 2 * len(gc.quant_cases(False)) + 2
    assert len(gc.quant_cases(False)) == len(gc.BLOCK_ELEMS) * len(gc.SCALES) * 2 + 4
    linear = gc.linear_checks("cpu", tokens=64, width=64)
    assert linear["ok"] and linear["exact_fp4"]["bit_identical"]
    sr = gc.sr_checks("cpu", backends=("eager",))
    assert sr["ok"] and sr["other_seed_differs/eager"]
    junit = {"exit_status": 0, "passed": ["t::a"], "failed": [], "skipped": []}
    numbers = {"pytest": junit, "quantize": grid, "linear": linear, "stochastic_rounding": sr}
    assert gc.correctness_verdict(numbers)[0] == "pass"
    key = gc.key_numbers({"step": "correctness", "numbers": numbers})
    assert "quantize eager: " in key and "Linear fp4 exact-GEMM: bit-identical" in key, key

    speed = {
        "qdq": gc.qdq_bandwidth("cpu", n=64, dtypes=("fp32",), reps=1, warmup=0),
        "lm": gc.lm_step_times("cpu", d=64, depth=1, seq=8, batch=2, warmup=1, rounds=1, steps=1),
    }
    assert set(speed["qdq"]["fp32"]["formats"]) == set(gc.QDQ_FORMATS)
    assert set(speed["lm"]["median_step_s"]) == {"bf16", "full MX", "hybrid"}
    status, msg = gc.speed_verdict(speed)
    assert status in ("pass", "fail") and "QDQ >= 0.6 of clone" in msg
    key = gc.key_numbers({"step": "speed", "numbers": speed})
    assert "QDQ/clone fp32: MXFP8 E4M3" in key and "LM step full MX" in key, key
    assert gc.speed_verdict({"qdq": {"error": "OOM", "problems": []}})[1].startswith("missed: qdq: OOM")

    monkeypatch.setattr(gc, "_mx_cases", lambda: None)  # tests/quant/mx_cases.py gone: own inputs
    x = gc.edge_input((8, 64), torch.bfloat16)
    assert x.dtype == torch.bfloat16 and x.isnan().any() and x.isinf().any() and (x == 0).any()
    assert gc.bitwise_problem(x, x.clone(), "same") is None
    y = x.clone()
    y[-1, -1] = y[-1, -1] * 2 + 1
    assert "1 of 512 elements differ" in gc.bitwise_problem(x, y, "nudged")


def test_worker_result_file(tmp_path):
    prog = gc.Progress(tmp_path / "r.json")
    prog.set("a", {"x": math.nan})
    prog.part("b", lambda: 1 / 0)
    data = json.loads((tmp_path / "r.json").read_text())
    assert data == {
        "numbers": {"a": {"x": "nan"}, "b": {"error": "ZeroDivisionError: division by zero", "problems": [
            "b: ZeroDivisionError: division by zero"]}},
        "error": None,
        "done": False,
    }  # fmt: skip
    assert os.listdir(tmp_path) == ["r.json"]


def test_the_cuda_tests_collect_on_an_image_without_wandb():
    """The correctness step runs ``pytest -k cuda tests`` under a GPU image's own python, which may
    have no wandb: test_wandb.py must skip itself there, not stop the whole collection (it imported
    wandb's protobufs before its importorskip, and every CUDA test went unrun)."""
    code = (
        "import sys; sys.modules['wandb'] = None; import pytest; "
        "sys.exit(pytest.main(['-q', '--collect-only', '-p', 'no:cacheprovider', '-p', 'no:xdist', "
        "'tests/test_wandb.py']))"
    )
    r = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, env=child_env(), capture_output=True, text=True
    )
    assert r.returncode == pytest.ExitCode.NO_TESTS_COLLECTED, r.stdout[-2000:]
    assert "could not import 'wandb'" in r.stdout


def test_the_offline_gpu_check_refuses_without_wheels(tmp_path):
    """scripts/gpu_check_offline.sh (a GPU machine with no registry): no wheels is one line and exit 2."""
    r = subprocess.run(
        ["bash", "scripts/gpu_check_offline.sh", "--out", str(tmp_path / "c")],
        cwd=REPO,
        env=child_env(MXSWEEP_WHEELS=str(tmp_path / "none")),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 2
    assert r.stderr.strip().splitlines() == [
        f"gpu_check_offline: no wheels in {tmp_path / 'none'} (set MXSWEEP_WHEELS; see this script's header)"
    ]
    assert not (tmp_path / "c").exists()
