"""records.atomic_write: the one atomic writer every record, manifest, checkpoint and corpus goes
through."""

from __future__ import annotations

import json
import os

import pytest

from records import atomic_write


def test_atomic_write_text_bytes_and_writer(tmp_path):
    p = tmp_path / "a.json"
    assert atomic_write(p, "é\n") == p and p.read_text(encoding="utf-8") == "é\n"
    atomic_write(p, b"\x00\x01")
    assert p.read_bytes() == b"\x00\x01"
    atomic_write(p, lambda tmp: tmp.write_text("via writer"))
    assert p.read_text() == "via writer"
    assert sorted(x.name for x in tmp_path.iterdir()) == ["a.json"]


def test_a_failed_write_keeps_the_old_file_and_leaves_no_temporary(tmp_path):
    p = tmp_path / "summary.json"
    atomic_write(p, "old")

    def half_then_fail(tmp):
        tmp.write_text("half")
        raise OSError(28, "No space left on device")

    with pytest.raises(OSError, match="(?i)no space"):
        atomic_write(p, half_then_fail)
    with pytest.raises(KeyboardInterrupt):
        atomic_write(p, lambda tmp: (tmp.write_text("x"), (_ for _ in ()).throw(KeyboardInterrupt())))
    assert p.read_text() == "old"
    assert [x.name for x in tmp_path.iterdir()] == ["summary.json"]


def test_the_temporary_is_per_process_and_beside_the_target(tmp_path):
    seen = []
    atomic_write(tmp_path / "m.json", lambda tmp: (seen.append(tmp), tmp.write_text("{}")))
    assert seen[0].parent == tmp_path and str(os.getpid()) in seen[0].name and seen[0].name.startswith(".")


def test_checkpoints_go_through_it(tmp_path, monkeypatch):
    """A checkpoint write that fails (disk full) leaves no step_*.tmp file behind."""
    import torch

    from quant import QuantPolicy
    from train import checkpoint

    def full(obj, f, *a, **k):
        open(f, "wb").write(b"partial")
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(torch, "save", full)
    model = torch.nn.Linear(2, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with pytest.raises(OSError):
        checkpoint.save(tmp_path, 3, model, opt, QuantPolicy(), {})
    left = [p.name for p in tmp_path.rglob("*") if p.is_file()]
    assert left == []


def _strict(text):
    """Parse as standard JSON: NaN / Infinity are errors."""
    import json

    def refuse(word):
        raise ValueError(f"non-standard JSON: {word}")

    return json.loads(text, parse_constant=refuse)


def test_records_are_standard_json():
    from records import dumps

    row = {"step": 5, "loss": float("inf"), "val": float("nan"), "nested": [1.0, float("-inf"), {"x": 2.5}]}
    assert _strict(dumps(row)) == {"step": 5, "loss": None, "val": None, "nested": [1.0, None, {"x": 2.5}]}


def test_a_diverged_run_writes_standard_json(tmp_path):
    """Issue 11, defect 11: diverged runs wrote Infinity/NaN into metrics.jsonl and summary.json."""
    from records import run as record

    record.append_metrics(tmp_path, {"step": 1, "loss": float("nan"), "grad_norm": float("inf")})
    record.write_summary(tmp_path, {"status": "diverged", "final_val_loss": float("inf")})
    for line in (tmp_path / "metrics.jsonl").read_text().splitlines():
        assert _strict(line)["loss"] is None
    assert _strict((tmp_path / "summary.json").read_text())["final_val_loss"] is None


# -- tolerant readers (issue 11, defect 3) -----------------------------------------------------------


def test_metrics_reader_skips_damage_and_names_the_lines(tmp_path):
    from records import RecordWarning, read_metrics

    good = '{"step": 1, "loss": 2.0}\n'
    (tmp_path / "metrics.jsonl").write_bytes(
        good.encode()
        + b'{"step": "abc", "loss": 1.0}\n'  # no whole-number step: dropped
        + b'{"step": 5, "loss": "x", "lr": 0.1}\n'  # text where a number lives: blanked
        + b'{"step": 6, "loss": 1.\xff5}\n'  # not UTF-8: that line only
        + b"[1, 2]\n"
        + b'{"step": 7, "loss": NaN}\n'  # older records: kept as Python wrote them
        + b'{"step": 8, "lo'  # the torn last line of a killed writer: dropped, named
    )
    with pytest.warns(RecordWarning) as caught:
        rows = read_metrics(tmp_path)
    assert [r["step"] for r in rows] == [1, 5, 7] and rows[1] == {"step": 5, "loss": None, "lr": 0.1}
    (msg,) = [str(w.message) for w in caught]
    assert "metrics.jsonl" in msg and "2 (no whole-number step)" in msg and "3 (loss is not a number)" in msg
    assert "4 (not JSON)" in msg and "6 (" not in msg and "7 (not JSON)" in msg


@pytest.mark.parametrize("text", [b"[1, 2, 3]", b"{not json", b'{"status": "done"\xff}', b""])
def test_an_unreadable_summary_is_none_with_a_warning(tmp_path, text):
    from records import RecordWarning, read_summary

    (tmp_path / "summary.json").write_bytes(text)
    with pytest.warns(RecordWarning, match="summary.json"):
        assert read_summary(tmp_path) is None
    assert read_summary(tmp_path / "nowhere") is None


def test_status_and_relaunch_survive_a_damaged_summary(tmp_path):
    """summary.json = [1,2,3] crashed --status and every relaunch (AttributeError); invalid JSON
    crashed every relaunch. Now: --status lists the run, and the relaunch resumes it to the end."""
    from launching import launch

    out = tmp_path / "run"
    args = ["task=proxy", "model.width=16", "model.depth=1", "train.steps=6", "train.eval_every=3",
            "train.ckpt_every=3", "logger=disabled", f"out_dir={out}"]  # fmt: skip
    assert launch(*args).returncode == 0
    for text in ("[1, 2, 3]", "{not json"):
        (out / "summary.json").write_text(text)
        st = launch("--status", str(tmp_path))
        assert st.returncode == 0 and "Traceback" not in st.stderr and "run" in st.stdout, st.stderr
        r = launch(*args)
        assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr
        assert _strict((out / "summary.json").read_text())["status"] == "done"


def test_a_copied_sweep_resumes_in_its_new_place(tmp_path):
    """Issue 11, defect 4: cp -r a sweep, delete one summary, relaunch into the copy: the run resumes
    (paths are not identity; config.yaml's out_dir and a branch's parent path may differ)."""
    import shutil

    from launching import launch

    from records import identity_of

    one = ["-m", "experiment=smoke", "sweep.progress=false", "logger=disabled",
           "sweep.precisions=[{name:mxfp8,w:fp8_e4m3,a:fp8_e4m3}]",
           "budget.ladder=[{depth:1,d_model:32,n_heads:2}]", "budget.flops=[1e9]"]  # fmt: skip
    r = launch(*one, f"hydra.sweep.dir={tmp_path / 'a'}")
    assert r.returncode == 0, r.stderr
    shutil.copytree(tmp_path / "a", tmp_path / "b")
    (run,) = [p for p in (tmp_path / "b").iterdir() if (p / "summary.json").exists()]
    (run / "summary.json").unlink()
    r = launch(*one, f"hydra.sweep.dir={tmp_path / 'b'}")
    assert r.returncode == 0 and "different config" not in r.stderr, r.stderr
    assert _strict((run / "summary.json").read_text())["status"] == "done"
    assert identity_of({"out_dir": "/x", "train": {"branch_from": "/old/sweep/p_1234"}}) == identity_of(
        {"out_dir": "/y", "train": {"branch_from": "/new/place/p_1234/"}}
    )


# -- the run lock (issue 11, defect 1) -------------------------------------------------------------


def test_the_run_lock_is_exclusive_and_breaks_only_stale_locks(tmp_path):
    import json
    import os
    import socket
    import time

    from records import lock

    with lock.hold(tmp_path) as mine:
        assert lock.holder(tmp_path)["token"] == mine["token"]
        with pytest.raises(lock.RunHeld, match=f"pid {os.getpid()} on {socket.gethostname()}"):
            with lock.hold(tmp_path):
                pass
    assert not (tmp_path / lock.MARKER).exists() and lock.holder(tmp_path) is None

    marker = tmp_path / lock.MARKER
    dead = {"host": socket.gethostname(), "pid": 2**22 + 12345, "job": None, "started": 0, "token": "x"}
    marker.write_text(json.dumps(dead))  # a holder on this host whose pid is gone
    assert lock.holder(tmp_path) is None
    with lock.hold(tmp_path) as mine:
        assert json.loads(marker.read_text())["token"] == mine["token"]

    elsewhere = {**dead, "host": "another-node", "pid": 1}
    marker.write_text(json.dumps(elsewhere))  # another host: only the heartbeat can tell
    with pytest.raises(lock.RunHeld, match="another-node"):
        with lock.hold(tmp_path):
            pass
    old = time.time() - lock.STALE_S - 5
    os.utime(marker, (old, old))
    with lock.hold(tmp_path):
        pass
    assert not marker.exists() and not list(tmp_path.glob(".running.json.stale-*"))


def test_two_launchers_on_one_sweep_never_train_a_run_twice(tmp_path):
    """The issue's reproduction: the same sweep started twice, one second apart. Each run is trained by
    one launcher (no duplicated metric steps), the other says it skipped it, both exit 0."""
    import subprocess
    import sys
    import time

    from launching import REPO, child_env

    cmd = [sys.executable, "launch.py", "-m", "experiment=smoke", "budget.flops=[3e9]",
           "budget.ratio_max=100", "train.ckpt_every=20", "logger=disabled", "sweep.progress=false",
           f"hydra.sweep.dir={tmp_path / 'twice'}"]  # fmt: skip
    first = subprocess.Popen(
        cmd, cwd=REPO, env=child_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    time.sleep(1)
    second = subprocess.run(cmd, cwd=REPO, env=child_env(), capture_output=True, text=True, timeout=900)
    out, err = first.communicate(timeout=900)
    assert first.returncode == 0, err[-2000:]
    assert second.returncode == 0, second.stderr[-2000:]
    runs = [p for p in (tmp_path / "twice").iterdir() if (p / "metrics.jsonl").exists()]
    assert runs
    for run in runs:
        steps = [json.loads(line)["step"] for line in (run / "metrics.jsonl").read_text().splitlines()]
        assert len(steps) == len(set(steps)), f"{run.name} trained twice"
        assert json.loads((run / "summary.json").read_text())["status"] == "done"
    assert "skipped: " in err + second.stderr


@pytest.fixture
def tiny_disk(tmp_path):
    """A 3 MB tmpfs (root only): the issue's disk-full reproduction."""
    import subprocess

    where = tmp_path / "disk"
    where.mkdir()
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=3m", "tmpfs", str(where)], capture_output=True)
    if r.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {r.stderr.decode().strip()}")
    yield where
    subprocess.run(["umount", str(where)], capture_output=True)


def test_a_full_disk_is_one_line_leaves_nothing_half_written_and_resumes(tiny_disk):
    """Issue 11, defect 6: 64-75-line tracebacks and orphan temporary files."""
    import subprocess

    from launching import launch

    out = tiny_disk / "run"
    args = ["task=proxy", "model.width=128", "model.depth=4", "train.steps=40", "train.ckpt_every=10",
            "logger=disabled", "logger.console_every_s=0", f"out_dir={out}"]  # fmt: skip
    r = launch(*args)
    lines = [x for x in r.stderr.strip().splitlines() if not x.startswith("run: ")]
    assert r.returncode == 1 and len(lines) == 1 and "Traceback" not in r.stderr, r.stderr
    assert (
        "no space left on device for" in lines[0]
        and "step_00000010.pt" in lines[0]
        and "MB needed" in lines[0]
    )
    assert not [p for p in out.rglob("*") if ".tmp" in p.name]  # no orphan temporaries
    subprocess.run(["mount", "-o", "remount,size=64m", str(tiny_disk)], check=True)
    r = launch(*args)
    assert r.returncode == 0, r.stderr
    assert json.loads((out / "summary.json").read_text())["status"] == "done"


def test_disk_full_names_the_file_and_the_bytes(tmp_path, monkeypatch):
    import errno

    from records import DiskFull

    def full(self, *a, **k):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(type(tmp_path), "write_text", full)
    with pytest.raises(DiskFull, match=r"summary.json \(12 bytes needed\)"):
        atomic_write(tmp_path / "summary.json", "x" * 12)
    assert list(tmp_path.iterdir()) == []


def test_disk_full_crosses_a_process_boundary():
    """A run's DiskFull (or RunHeld) reaches the sweep through the pool launcher's pickling (loky): it
    must unpickle as itself. It did not (OSError's pickle calls the class with (errno, message), which
    DiskFull's __init__ read as (path, needed)), and the pool broke: every queued run went unlaunched."""
    import pickle
    from pathlib import Path

    from records import DiskFull

    e = pickle.loads(pickle.dumps(DiskFull(Path("/sw/run/ckpt/step_50.pt"), 6_000_000, at_least=True)))
    assert isinstance(e, DiskFull) and e.path == Path("/sw/run/ckpt/step_50.pt") and e.needed == 6_000_000
    assert str(e) == "[Errno 28] no space left on device for /sw/run/ckpt/step_50.pt (at least 6 MB needed)"
    from records.lock import RunHeld

    held = RunHeld(Path("/sw/run/running.json"), {"pid": 7, "host": "n1", "started": 0})
    again = pickle.loads(pickle.dumps(held))
    assert isinstance(again, RunHeld) and again.holder == held.holder and str(again) == str(held)


# -- the precision defaults and the one label (issue 11; issue 12's "one precision label") -------------
def test_quant_policy_takes_its_defaults_from_the_records_table():
    import dataclasses

    from quant import QuantPolicy
    from records import precision

    fields = {f.name: f.default for f in dataclasses.fields(QuantPolicy)}
    assert fields == precision.DEFAULTS  # one table: a new policy field must get its default there
    precision.DEFAULTS["block_size"]  # noqa: B018 (the key the label's bs tag reads)


@pytest.mark.parametrize(
    ("settings", "expected"),
    [
        (None, "fp32"),
        ({"w": "bf16", "a": "bf16"}, "bf16"),
        ({"w": "fp8_e4m3", "a": "fp8_e4m3"}, "mxfp8_e4m3"),
        ({"w": "mxfp8_e4m3", "a": "mxfp8_e4m3"}, "mxfp8_e4m3"),  # the recipe: the same numerics
        ({"w": "mxfp8", "a": "mxfp8"}, "mxfp8_e4m3"),  # its short name
        ({"w": "fp8_e4m3", "a": "bf16"}, "mxfp8_e4m3w-bf16a"),
        ({"w": "fp8_e4m3", "a": "fp8_e4m3", "quantize_backward": False}, "mxfp8_e4m3-fwd"),
        ({"w": "fp8_e4m3", "a": "fp8_e4m3", "norm_affine": "fp8_e4m3"}, "mxfp8_e4m3-ln_mxfp8_e4m3"),
        (
            {"w": "fp8_e4m3", "a": "fp8_e4m3", "norm_affine": "fp8_e4m3", "norm_scale_rule": "ceil"},
            "mxfp8_e4m3-ln_mxfp8_e4m3-ln_ceil",
        ),
        ({"w": "fp4_e2m1", "a": "fp4_e2m1", "block_size": 16, "scale": "ue5m3"}, "fp4_e2m1-bs16-ue5m3"),
        (
            {"w": "fp4_e2m1", "a": "fp4_e2m1", "block_size": 8, "scale": "ue4m3", "global_scale": True},
            "fp4_e2m1-bs8-ue4m3-global",
        ),
        ({"w": "nvfp4", "a": "nvfp4", "global_scale": False}, "nvfp4"),
        ({"w": "fp8_e4m3", "a": "fp8_e4m3", "g_dgrad": "fp8_e5m2"}, "mxfp8_e4m3-g_dgrad_mxfp8_e5m2"),
        ({"w": "fp8_e4m3", "a": "fp8_e4m3", "g_dgrad": "fp8_e4m3"}, "mxfp8_e4m3"),  # = inherited
        ({"w": "nvfp4", "a": "nvfp4", "exclude": ["embed*", "head"]}, "nvfp4-excl2"),
    ],
)
def test_the_precision_label(settings, expected):
    from records import precision

    assert precision.label(settings) == expected
    assert precision.label(settings, name="my_name") == "my_name"
    assert "/" not in expected and " " not in expected  # a directory name


def test_resolve_fills_defaults_and_backward_roles():
    from records import precision

    p = precision.resolve({"w": "fp8_e4m3", "a": "bf16", "g_dgrad": "fp8_e5m2"})
    resolved = (p["w_bwd"], p["a_bwd"], p["g_dgrad"], p["g_wgrad"])
    assert resolved == ("fp8_e4m3", "bf16", "fp8_e5m2", "fp8_e5m2")
    f = precision.resolve({"w": "fp8_e4m3", "a": "fp8_e4m3", "quantize_backward": False})
    assert f["w_bwd"] == f["g_wgrad"] == "fp32" and f["block_size"] == 32


def test_a_sweep_label_is_the_same_in_the_directory_status_record_and_report(tmp_path):
    """A named precision ('mxfp8') and an unnamed one are labelled alike everywhere: the run
    directory, --status, the record's config (logger.label) and analysis's precision column."""
    import yaml
    from launching import launch

    from analysis import collect

    sweep = tmp_path / "s"
    args = ["-m", "experiment=smoke", "sweep.progress=false", "logger=disabled",
            "sweep.precisions=[{name:mxfp8,w:fp8_e4m3,a:fp8_e4m3},{w:fp8_e4m3,a:bf16}]",
            "budget.ladder=[{depth:1,d_model:32,n_heads:2}]", "budget.flops=[1e9]",
            f"hydra.sweep.dir={sweep}"]  # fmt: skip
    r = launch(*args)
    assert r.returncode == 0, r.stderr
    runs = sorted(p.name for p in sweep.iterdir() if (p / "summary.json").exists())
    assert [n.split("_C1e9")[0] for n in runs] == ["mxfp8", "mxfp8_e4m3w-bf16a"], runs
    config = yaml.safe_load((sweep / runs[0] / "config.yaml").read_text())
    assert config["logger"]["label"] == "mxfp8"
    assert config["logger"]["budget"] == 1e9  # the run's nominal budget, for wandb's config.mxsweep
    assert sorted(collect(sweep)["precision"]) == ["mxfp8", "mxfp8_e4m3w-bf16a"]
    status = launch("--status", str(sweep))
    assert status.returncode == 0 and "mxfp8_e4m3w-bf16a" in status.stdout and " mxfp8 " in status.stdout


@pytest.mark.parametrize(
    ("field", "default", "other"), [("global_scale", False, True), ("grad_scale_rule", None, "ceil")]
)
def test_a_field_added_later_keeps_every_older_identity(field, default, other):
    """precision.global_scale (and later precision.grad_scale_rule) came after thousands of records: a
    run that leaves it at its default hashes as its config.yaml without the field did (its directory
    name, skip rule and resume check stay valid); a run that sets it is another run."""
    import dataclasses

    from records.identity import LATE_DEFAULTS, identity, run_id
    from train.config import PrecisionConfig, RunConfig

    run = RunConfig(precision=PrecisionConfig(w="fp4_e2m1", a="fp4_e2m1", scale="ue4m3"))
    plain = identity(run)
    assert field not in plain["precision"] and f"precision.{field}" in LATE_DEFAULTS
    older = json.loads(json.dumps(plain))  # as a config.yaml written before the field existed
    assert (
        run_id(older) == run_id(run) == run_id({**older, "precision": {**older["precision"], field: default}})
    )
    changed = dataclasses.replace(run, precision=run.precision.replace(**{field: other}))
    assert identity(changed)["precision"][field] == other and run_id(changed) != run_id(run)
