"""DDP: ``torchrun --nproc_per_node=2 launch.py`` trains the LM (gloo on CPU) on the same loss curve as
one process with the same global batch, and only rank 0 writes the run record."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
from launching import REPO, child_env

# tiny LM, synthetic bytes, full MX (fp8 weights, activations and gradients): 8 sequences of 32 per
# step, i.e. 4 per rank; 128 tokens per rank keeps the wgrad blocks (32 tokens) aligned across ranks.
ARGS = [
    "logger=disabled", "data.source=synthetic", "data.seq_len=32", "data.synthetic_bytes=8192",
    "model.depth=1", "train.steps=10", "train.batch_size=8", "train.log_every=1", "train.eval_every=5",
    "train.eval_batches=2", "train.ckpt_every=5", "precision.w=fp8_e4m3", "precision.a=fp8_e4m3",
    "precision.g_dgrad=fp8_e5m2", "precision.g_wgrad=fp8_e5m2",
]  # fmt: skip


def _env() -> dict[str, str]:
    env = child_env()
    if Path("/sys/class/net/lo").exists():
        env.setdefault("GLOO_SOCKET_IFNAME", "lo")  # gloo on loopback, whatever the hostname resolves to
    return env


def _run(prefix: list[str], out: Path) -> subprocess.CompletedProcess:
    cmd = [*prefix, "launch.py", *ARGS, f"out_dir={out}"]
    r = subprocess.run(cmd, cwd=REPO, env=_env(), capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    return r


def _rows(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]


@pytest.mark.skipif(
    not dist.is_available() or not dist.is_gloo_available(), reason="needs torch.distributed gloo"
)
def test_two_ranks_match_one_process(tmp_path):
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2"]
    _run(torchrun, tmp_path / "ddp")
    _run([sys.executable], tmp_path / "single")
    ddp, single = _rows(tmp_path / "ddp"), _rows(tmp_path / "single")
    assert [r["step"] for r in ddp] == list(range(1, 11))  # written once (rank 0), not once per rank
    for a, b in zip(ddp, single, strict=True):
        for key in ("loss", "grad_norm", "val_loss"):
            assert (key in a) == (key in b)
            if key in a:
                assert a[key] == pytest.approx(b[key], rel=1e-5), (a["step"], key)
        assert a["tokens"] == b["tokens"] == a["step"] * 8 * 32  # tokens count the global batch
    assert single[-1]["loss"] < single[0]["loss"] - 1.0  # it learned, so equal curves mean something
    summary = json.loads((tmp_path / "ddp" / "summary.json").read_text())
    assert summary["status"] == "done" and summary["D"] == 10 * 8 * 32 and summary["world_size"] == 2
    assert sorted(p.name for p in (tmp_path / "ddp" / "ckpt").iterdir()) == [
        "step_00000005.pt",
        "step_00000010.pt",
    ]


def test_each_rank_gets_its_shard_of_the_global_batch(monkeypatch):
    """make_task reads RANK/WORLD_SIZE (torchrun's) and hands the data module this rank's rows."""
    from models import LMConfig
    from train.config import RunConfig, TrainConfig
    from train.data import DataConfig
    from train.tasks import make_task

    run = RunConfig(task="lm", model=LMConfig(depth=1, vocab_size=256), train=TrainConfig(batch_size=8))
    run.data = DataConfig(source="synthetic", seq_len=32, synthetic_bytes=8192)
    full = make_task(run).batch(3)
    shards = []
    for rank in (0, 1):
        monkeypatch.setenv("RANK", str(rank))
        monkeypatch.setenv("WORLD_SIZE", "2")
        task = make_task(run)
        assert task.tokens_per_step == 8 * 32  # accounting stays global
        shards.append(task.batch(3))
    for i in (0, 1):  # inputs, targets
        assert shards[0][i].shape == (4, 32)
        assert torch.equal(torch.cat([shards[0][i], shards[1][i]]), full[i])


def _stamp(env: dict[str, str]) -> str:
    code = "import sweeper.config as c; print(c.launch_time('%Y%m%d-%H%M%S.%f'), c.rank0_only('.hydra'))"
    r = subprocess.run([sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-2000:]
    return r.stdout.strip()


def test_ranks_agree_on_the_default_run_directory():
    """Every rank composes ``out_dir: outputs/runs/${task}-${launch_time:...}`` itself: under torchrun
    the stamp is the agent's (here: this test process's) start, so ranks started apart agree."""
    env = {
        k: v for k, v in os.environ.items() if k not in ("RANK", "TORCHELASTIC_RUN_ID", "GROUP_WORLD_SIZE")
    }
    rank0 = _stamp({**env, "TORCHELASTIC_RUN_ID": "t", "RANK": "0"})
    rank1 = _stamp({**env, "TORCHELASTIC_RUN_ID": "t", "RANK": "1"})
    assert rank0.split()[0] == rank1.split()[0]  # microseconds included: same agent start
    assert rank0.split()[1] == ".hydra" and rank1.split()[1] == "None"  # .hydra from rank 0 only
    assert _stamp(env).split()[0] != _stamp(env).split()[0]  # outside torchrun: now, per process
    multi_node = {**env, "TORCHELASTIC_RUN_ID": "t", "GROUP_WORLD_SIZE": "2"}
    code = "import sweeper.config as c; c.launch_time('%Y')"
    multi = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, env=multi_node, capture_output=True, text=True
    )
    assert multi.returncode != 0 and "pass out_dir=" in multi.stderr


@pytest.mark.skipif(
    not dist.is_available() or not dist.is_gloo_available(), reason="needs torch.distributed gloo"
)
def test_torchrun_with_the_default_out_dir_writes_one_run(tmp_path):
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2"]
    args = [a for a in ARGS if not a.startswith(("train.steps", "train.ckpt_every"))]
    cmd = [*torchrun, str(REPO / "launch.py"), *args, "train.steps=2", "train.ckpt_every=0"]
    r = subprocess.run(cmd, cwd=tmp_path, env=_env(), capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    runs = list((tmp_path / "outputs" / "runs").iterdir())
    assert len(runs) == 1 and (runs[0] / "summary.json").exists(), runs
    assert (runs[0] / ".hydra" / "config.yaml").exists()
