"""records.atomic_write: the one atomic writer every record, manifest, checkpoint and corpus goes
through."""

from __future__ import annotations

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

    with pytest.raises(OSError, match="No space"):
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
    from train import record

    record.append_metrics(tmp_path, {"step": 1, "loss": float("nan"), "grad_norm": float("inf")})
    record.write_summary(tmp_path, {"status": "diverged", "final_val_loss": float("inf")})
    for line in (tmp_path / "metrics.jsonl").read_text().splitlines():
        assert _strict(line)["loss"] is None
    assert _strict((tmp_path / "summary.json").read_text())["final_val_loss"] is None
