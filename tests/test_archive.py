"""analysis.archive: the records behind docs/results.md survive a fresh checkout."""

from __future__ import annotations

import json
import os
import tarfile

from analysis import archive


def sweep(tmp_path):
    d = tmp_path / "outputs" / "sweeps" / "demo"
    run = d / "run_a"
    (run / "ckpt").mkdir(parents=True)
    (run / "wandb" / "offline-run").mkdir(parents=True)
    (d / "manifest.json").write_text("{}\n")
    (d / "multirun.yaml").write_text("sweep: {branch_at: 0.4}\n")
    (run / "config.yaml").write_text("train: {steps: 5}\n")
    (run / "metrics.jsonl").write_text(json.dumps({"step": 1, "loss": 1.0}) + "\n")
    (run / "summary.json").write_text(json.dumps({"status": "done"}) + "\n")
    (run / "probe.jsonl").write_text("{}\n")
    (run / "ckpt" / "step_5.pt").write_bytes(b"big")
    (run / "wandb" / "offline-run" / "summary.json").write_text("{}")
    (run / "launch.log").write_text("log")
    (run / "running.json").write_text("{}")
    os.utime(run / "config.yaml", (1_000_000, 1_000_000))
    os.utime(run / "summary.json", (1_000_600, 1_000_600))
    return d


def test_pack_keeps_the_records_and_drops_checkpoints_wandb_and_logs(tmp_path):
    d = sweep(tmp_path)
    path = archive.pack(d, tmp_path / "docs" / "records")
    assert path == tmp_path / "docs" / "records" / "demo.tar.xz"
    with tarfile.open(path) as tar:
        names = sorted(tar.getnames())
    assert names == [
        "manifest.json",
        "multirun.yaml",
        "run_a/config.yaml",
        "run_a/metrics.jsonl",
        "run_a/probe.jsonl",
        "run_a/summary.json",
    ]
    again = archive.pack(d, tmp_path / "again")
    assert again.read_bytes() == path.read_bytes()  # same records, same bytes: no churn in git


def test_restore_round_trips_with_mtimes_and_never_overwrites(tmp_path):
    d = sweep(tmp_path)
    path = archive.pack(d, tmp_path / "records")
    fresh = tmp_path / "clone" / "outputs" / "sweeps" / "demo"
    assert archive.restore(path, fresh)
    assert (fresh / "run_a" / "summary.json").read_text() == (d / "run_a" / "summary.json").read_text()
    assert (fresh / "run_a" / "config.yaml").stat().st_mtime == 1_000_000  # wall times read the same
    assert (fresh / "run_a" / "summary.json").stat().st_mtime == 1_000_600
    assert not (fresh / "run_a" / "ckpt").exists()
    (fresh / "run_a" / "summary.json").write_text("live")
    assert not archive.restore(path, fresh)  # live records win
    assert (fresh / "run_a" / "summary.json").read_text() == "live"
    assert not archive.restore(tmp_path / "missing.tar.xz", tmp_path / "x") and not (tmp_path / "x").exists()


def test_a_studys_figures_travel_with_its_summary(tmp_path):
    d = tmp_path / "studies" / "block_size_study"
    (d / "figures").mkdir(parents=True)
    (d / "summary.json").write_text(json.dumps({"figures": ["figures/sigma.png", "figures/gone.png"]}))
    (d / "figures" / "sigma.png").write_bytes(b"png")
    (d / "figures" / "other.png").write_bytes(b"png")
    with tarfile.open(archive.pack(d, tmp_path / "records")) as tar:
        assert sorted(tar.getnames()) == ["figures/sigma.png", "summary.json"]


def test_pack_of_nothing_writes_nothing(tmp_path):
    (tmp_path / "empty").mkdir()
    assert archive.pack(tmp_path / "empty", tmp_path / "records") is None
    assert archive.pack(tmp_path / "absent", tmp_path / "records") is None
    assert not (tmp_path / "records").exists()
