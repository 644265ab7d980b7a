"""wandb logging: an offline run read back from disk mirrors the run record (config, history, summary,
group, tags); a resume continues the same wandb run; mode resolution; disabled writes nothing.
No network: offline or disabled only, wandb's config/cache dirs inside tmp_path."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from models import ProxyConfig
from records import run as record
from train.config import LoggerConfig, PrecisionConfig, RunConfig, TrainConfig, WandbConfig
from train.hooks import default_hooks
from train.loop import train
from train.tasks import make_task
from train.wandb_logger import WandbLogger, api_key_configured, precision_tags, resolve_mode, run_id

# Before wandb_reader, which imports wandb's protobufs: without wandb (a GPU image with no wandb, say)
# this file is skipped instead of stopping the whole suite's collection.
wandb = pytest.importorskip("wandb")

sys.path.insert(0, str(Path(__file__).resolve().parent))
from callbacks import StopAt  # noqa: E402
from wandb_reader import offline_runs, read_run  # noqa: E402


@pytest.fixture(autouse=True)
def quiet_offline_wandb(one_thread, tmp_path, monkeypatch):
    """One thread (the eager quantizer comes from conftest), and a wandb that cannot reach the
    network or the user's home."""
    for key in ("WANDB_API_KEY", "WANDB_MODE", "WANDB_BASE_URL", "NETRC"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("WANDB_SILENT", "true")
    monkeypatch.setenv("WANDB_CONFIG_DIR", str(tmp_path / "wandb-config"))
    monkeypatch.setenv("WANDB_CACHE_DIR", str(tmp_path / "wandb-cache"))
    monkeypatch.setenv("WANDB_DATA_DIR", str(tmp_path / "wandb-data"))


def proxy_run(out: Path, mode: str = "offline", **train_kw) -> RunConfig:
    kw = dict(steps=12, batch_size=16, lr=3e-3, grad_clip=None, eval_every=6, eval_batches=1, spike_window=4)
    return RunConfig(
        task="proxy",
        model=ProxyConfig(depth=2, width=32),
        precision=PrecisionConfig(w="fp8_e4m3", a="bf16"),
        train=TrainConfig(**{**kw, **train_kw}),
        out_dir=str(out),
        logger=LoggerConfig(wandb=WandbConfig(mode=mode, group="sweep-a", tags=["smoke"])),
    )


def run(cfg: RunConfig, extra: tuple = ()) -> dict:
    summary = train(cfg, make_task(cfg), [*extra, *default_hooks(cfg)])
    # run.finish() returns before wandb's service process has closed the .wandb file; teardown
    # stops that process, so the file is complete when the test reads it
    wandb.teardown()
    return summary


def assert_history_is_the_record(history: list[dict], rows: list[dict]) -> None:
    by_step = {h["_step"]: h for h in history}
    assert sorted(by_step) == [r["step"] for r in rows]
    for r in rows:
        h = by_step[r["step"]]
        assert {k for k in h if not k.startswith("_")} == set(r)  # the same keys
        for key in ("step", "loss", "lr", "grad_norm", "tokens", "val_loss", "clip_ln/blocks.0.norm"):
            if key in r:
                assert h[key] == r[key], (r["step"], key)


def test_offline_run_mirrors_the_record(tmp_path):
    out = tmp_path / "run"
    summary = run(proxy_run(out))
    (path,) = offline_runs(out)
    logged = read_run(path)
    rows = record.read_metrics(out)
    assert len(rows) == 12 and sum("val_loss" in r for r in rows) == 2
    assert_history_is_the_record(logged["history"], rows)
    from records import run_id as identity_hash

    config = OmegaConf.to_container(OmegaConf.load(out / "config.yaml"))
    assert logged["run_id"] == run_id(out) == identity_hash(config)  # the wandb id is the mxsweep id
    assert logged["project"] == "mxsweep" and logged["name"] == "run" and logged["job_type"] == "train"
    assert logged["group"] == "sweep-a"
    assert set(logged["tags"]) == {"task:proxy", "precision:mxfp8_e4m3w-bf16a", "smoke"}
    mxsweep = logged["config"].pop("mxsweep")
    assert mxsweep == {"run_id": identity_hash(config), "sweep": "sweep-a", "budget": None}  # a single run
    assert logged["config"] == config
    assert logged["summary"]["status"] == "done" == summary["status"]
    assert logged["summary"]["final_val_loss"] == summary["final_val_loss"]
    assert logged["summary"]["N"] == summary["N"]


def test_resume_continues_the_same_wandb_run(tmp_path):
    out = tmp_path / "run"
    first = run(proxy_run(out, ckpt_every=0), extra=(StopAt(5),))
    assert first["status"] == "interrupted"
    # a resume may change the logger (not part of the run's identity), here only the tags
    resumed = proxy_run(out, ckpt_every=0)
    resumed.logger.wandb.tags = ["smoke", "resumed"]
    assert run(resumed)["status"] == "done"
    attempts = [read_run(p) for p in offline_runs(out)]
    assert len(attempts) == 2 and attempts[0]["run_id"] == attempts[1]["run_id"] == run_id(out)
    assert [h["_step"] for h in attempts[0]["history"]] == [1, 2, 3, 4, 5]
    assert [h["_step"] for h in attempts[1]["history"]] == list(range(6, 13))
    assert "resumed" in attempts[1]["tags"]
    assert_history_is_the_record(attempts[0]["history"] + attempts[1]["history"], record.read_metrics(out))


def test_mode_resolution(tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    env = {"HOME": str(home)}
    assert resolve_mode("auto", env) == "offline" and not api_key_configured(env)
    assert resolve_mode("auto", {**env, "WANDB_API_KEY": "x" * 40}) == "online"
    netrc = home / ".netrc"
    netrc.write_text("machine api.wandb.ai\n  login user\n  password " + "k" * 40 + "\n")
    netrc.chmod(0o600)
    assert resolve_mode("auto", env) == "online"
    assert resolve_mode("auto", {**env, "WANDB_BASE_URL": "https://wandb.example.org"}) == "offline"
    assert resolve_mode("auto", {**env, "WANDB_MODE": "offline"}) == "offline"  # the env var wins
    assert resolve_mode("auto", {**env, "WANDB_MODE": "disabled"}) == "disabled"
    assert resolve_mode("auto", {**env, "WANDB_MODE": "dryrun"}) == "offline"
    assert resolve_mode("offline", {**env, "WANDB_API_KEY": "x"}) == "offline"  # explicit wins
    assert resolve_mode("online", {**env, "WANDB_MODE": "disabled"}) == "online"


def test_disabled_writes_nothing(tmp_path):
    out = tmp_path / "run"
    summary = run(proxy_run(out, mode="disabled", steps=3))
    assert summary["status"] == "done" and not (out / "wandb").exists()
    logger = WandbLogger(WandbConfig(mode="disabled"))
    assert logger.run is None


def test_tags_and_config_validation():
    cfg = proxy_run(Path("x"))
    cfg.precision = PrecisionConfig(w="fp8_e4m3", a="fp8_e4m3", g_dgrad="fp8_e5m2", block_size=16)
    assert precision_tags(cfg) == ["task:proxy", "precision:mxfp8_e4m3-g_dgrad_mxfp8_e5m2-bs16"]
    cfg.logger.label = "e4m3_grad_e5m2"  # the sweep's name for the precision is the run's label
    assert precision_tags(cfg) == ["task:proxy", "precision:e4m3_grad_e5m2"]
    with pytest.raises(ValueError, match=r"logger\.wandb\.mode"):
        WandbConfig(mode="on")
    with pytest.raises(ValueError, match=r"logger\.wandb\.tags"):
        WandbConfig(tags=["t" * 65])
    back = OmegaConf.to_object(OmegaConf.structured(cfg))
    assert back.logger.wandb.group == "sweep-a" and back.logger.wandb.tags == ["smoke"]
