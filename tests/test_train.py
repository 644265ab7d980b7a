"""Training core: loss falls (LM and proxy), exact resume, schedules, branching, divergence, spikes,
the fp32 twin, run records and config validation. CPU, tiny models."""

from __future__ import annotations

import json
import signal
from pathlib import Path

import pytest
import torch
from callbacks import StopAt
from omegaconf import OmegaConf

import quant
from models import LMConfig, ProxyConfig
from records import run as record
from train import checkpoint
from train.callbacks import Callback
from train.config import LoggerConfig, PrecisionConfig, RunConfig, ScheduleEntry, TrainConfig, WandbConfig
from train.hooks import SpikeDetector, default_hooks
from train.loop import train
from train.objectives import LMTask, ProxyTask
from train.tasks import make_task

# Tiny tensors: more threads only add overhead (and contention on 2 cores).
pytestmark = pytest.mark.usefixtures("one_thread")


class ToyTokens:
    """Seeded synthetic tokens: a noisy affine Markov chain mod V (t' = 5t + 3 w.p. 0.9), so next-token
    prediction is learnable. Batches are a pure function of (seed, step)."""

    def __init__(self, vocab: int = 256, seq: int = 32, batch: int = 8, seed: int = 0, n_train: int = 64):
        self.vocab, self.seq, self.batch, self.seed, self.n_train = vocab, seq, batch, seed, n_train
        self.tokens_per_step = batch * seq

    def _batch(self, index: int, stream: int) -> tuple[torch.Tensor, torch.Tensor]:
        g = torch.Generator().manual_seed(self.seed * 1_000_003 + stream * 100_003 + index)
        t = torch.empty(self.batch, self.seq + 1, dtype=torch.long)
        t[:, 0] = torch.randint(self.vocab, (self.batch,), generator=g)
        noise = torch.randint(self.vocab, (self.batch, self.seq), generator=g)
        keep = torch.rand(self.batch, self.seq, generator=g) < 0.9
        for i in range(self.seq):
            t[:, i + 1] = torch.where(keep[:, i], (5 * t[:, i] + 3) % self.vocab, noise[:, i])
        return t[:, :-1], t[:, 1:]

    def get(self, step: int) -> tuple[torch.Tensor, torch.Tensor]:
        return self._batch(step % (self.n_train // self.batch), 0)

    def val_batches(self, n: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
        return [self._batch(i, 1) for i in range(n)]

    def epoch(self, step: int) -> float:
        return step * self.batch / self.n_train


LM_CFG = LMConfig(depth=1, vocab_size=256)
PROXY_CFG = ProxyConfig(depth=2, width=32)
NO_WANDB = LoggerConfig(wandb=WandbConfig(mode="disabled"))  # tests never reach for the network


def lm_run(out, **train) -> RunConfig:
    kw = dict(steps=40, batch_size=8, lr=1e-2, eval_every=20, eval_batches=2, ckpt_every=0, spike_window=10)
    return RunConfig(
        task="lm", model=LM_CFG, train=TrainConfig(**{**kw, **train}), out_dir=str(out), logger=NO_WANDB
    )


def proxy_run(out, precision: PrecisionConfig | None = None, **train) -> RunConfig:
    kw = dict(
        steps=40, batch_size=32, lr=3e-3, grad_clip=None, eval_every=20, eval_batches=2, spike_window=10
    )
    return RunConfig(
        task="proxy",
        model=PROXY_CFG,
        precision=precision or PrecisionConfig(),
        train=TrainConfig(**{**kw, **train}),
        out_dir=str(out),
        logger=NO_WANDB,
    )


def run_task(run: RunConfig, extra: tuple = (), **kw) -> dict:
    source = ToyTokens(batch=run.train.batch_size, seed=run.train.seed) if run.task == "lm" else None
    task = make_task(run, source)
    return train(run, task, [*extra, *default_hooks(run)], **kw)


def losses(out) -> dict[int, float]:
    return {r["step"]: r["loss"] for r in record.read_metrics(out)}


def test_lm_loss_falls_and_record_is_complete(tmp_path):
    summary = run_task(lm_run(tmp_path))
    assert summary["status"] == "done" and summary["step"] == 40
    rows = record.read_metrics(tmp_path)
    assert [r["step"] for r in rows] == list(range(1, 41))
    first, last = rows[0]["loss"], sum(r["loss"] for r in rows[-5:]) / 5
    assert last < first - 1.0, (first, last)
    assert summary["min_val_loss"] <= summary["final_val_loss"] < first
    assert summary["N"] == LM_CFG.n_params and summary["D"] == 40 * 8 * 32
    assert summary["C"] == 6 * summary["N"] * summary["D"]
    assert summary["versions"]["torch"] == torch.__version__ and summary["median_step_time"] > 0
    # what decides fp32 rounding besides the code: records from different CPUs can differ in the bits
    assert summary["hardware"]["cpu_capability"] == torch.backends.cpu.get_cpu_capability()
    assert summary["hardware"]["threads"] == torch.get_num_threads()
    assert summary["quant_backend"] == quant.get_backend()  # which quantizer code made the bits
    cpuinfo = Path("/proc/cpuinfo")  # two CPUs of one ISA can still round differently: the model too
    if cpuinfo.exists():
        names = [
            ln.split(":", 1)[1].strip()
            for ln in cpuinfo.read_text().splitlines()
            if ln.startswith("model name")
        ]
        assert names and summary["hardware"]["cpu"] == names[0]
    assert rows[-1]["tokens"] == summary["D"] and rows[-1]["epoch"] == pytest.approx(40 * 8 / 64)
    cfg = OmegaConf.load(tmp_path / "config.yaml")
    assert cfg.model.vocab_size == 256 and cfg.train.steps == 40
    assert checkpoint.latest(tmp_path) == checkpoint.path_for(tmp_path, 40)


def test_proxy_loss_falls(tmp_path):
    summary = run_task(proxy_run(tmp_path, steps=60))
    rows = record.read_metrics(tmp_path)
    assert summary["status"] == "done" and summary["N"] == PROXY_CFG.n_params
    assert sum(r["loss"] for r in rows[-5:]) / 5 < 0.5 * rows[0]["loss"]
    assert not any(k.startswith("clip_") for k in rows[-1])  # fp32: no clipping diagnostics


def _strip(rows: list[dict]) -> list[dict]:
    return [{k: v for k, v in r.items() if k not in record.TIMINGS} for r in rows]


@pytest.mark.parametrize("task", ["proxy", "lm"])
def test_resume_is_exact(tmp_path, task):
    prec = PrecisionConfig(w="fp8_e4m3", a="fp8_e4m3", grad_rounding="stochastic")
    if task == "proxy":  # MX with stochastic rounding, the fp32 twin and the spike detector all resume
        steps, make = 60, lambda out: proxy_run(out, prec, steps=60, twin_every=5)
    else:
        steps, make = 60, lambda out: lm_run(out, steps=60, eval_every=25)
    straight = run_task(make(tmp_path / "a"))
    first = run_task(make(tmp_path / "b"), extra=(StopAt(steps // 2),))
    assert first["status"] == "interrupted" and first["step"] == steps // 2
    assert sorted(checkpoint.available(tmp_path / "b")) == [steps // 2]
    resumed = run_task(make(tmp_path / "b"))
    assert resumed["status"] == "done"
    assert _strip(record.read_metrics(tmp_path / "a")) == _strip(record.read_metrics(tmp_path / "b"))
    for key in ("final_val_loss", "min_val_loss", "final_train_loss", "spike_step"):
        assert straight[key] == resumed[key]


def test_resume_passes_over_a_damaged_checkpoint_and_ends_bit_identical(tmp_path, capfd):
    """Issue 11, defect 2: the newest checkpoint cut in half (a copy, a full disk): the run resumes from
    the one before it with one line saying so, and ends exactly as an uninterrupted run; a temporary
    left by a SIGKILL mid-save is removed."""
    prec = PrecisionConfig(w="fp8_e4m3", a="fp8_e4m3")

    def make(out):
        return proxy_run(out, prec, steps=30, twin_every=5, ckpt_every=10)

    straight = run_task(make(tmp_path / "a"))
    first = run_task(make(tmp_path / "b"), extra=(StopAt(20),))
    assert first["status"] == "interrupted" and sorted(checkpoint.available(tmp_path / "b")) == [10, 20]
    newest = checkpoint.path_for(tmp_path / "b", 20)
    newest.write_bytes(newest.read_bytes()[: newest.stat().st_size // 2])
    orphan = newest.parent / ".step_00000030.pt.tmp999999999"  # no such process
    orphan.write_bytes(b"half a checkpoint")
    capfd.readouterr()
    resumed = run_task(make(tmp_path / "b"))
    err = capfd.readouterr().err
    assert resumed["status"] == "done" and not orphan.exists()
    assert "step_00000020.pt is unreadable" in err and "resume: from step_00000010.pt" in err
    assert "Traceback" not in err
    assert _strip(record.read_metrics(tmp_path / "a")) == _strip(record.read_metrics(tmp_path / "b"))
    for key in ("final_val_loss", "min_val_loss", "final_train_loss"):
        assert straight[key] == resumed[key]


def test_a_checkpoint_that_would_run_code_is_refused_in_one_line(tmp_path):
    """Issue 11, defect 8: a pickle that needs code to load is refused, and the message says it is not a
    mxsweep checkpoint (not "pass weights_only=False")."""

    class Evil:
        def __reduce__(self):
            return (print, ("this would have run",))

    path = tmp_path / "step_00000001.pt"
    torch.save({"model": Evil(), "step": 1}, path)
    with pytest.raises(checkpoint.CheckpointError) as e:
        checkpoint.load(path)
    msg = str(e.value)
    assert "not a mxsweep checkpoint" in msg and "not loaded" in msg and "weights_only" not in msg
    assert "\n" not in msg
    torch.save([1, 2], path)
    with pytest.raises(checkpoint.CheckpointError, match="no model state or step"):
        checkpoint.load(path)


class Recorder(Callback):
    def __init__(self):
        self.policy, self.batches = {}, {}

    def on_step_end(self, state, metrics):
        self.policy[state.step] = quant.policy_of(state.model).w
        self.batches[state.step] = state.batch[0].sum().item()


class SeedProbe(Callback):
    def on_step_end(self, state, metrics):
        lin = next(m for m in state.model.modules() if getattr(m, "mx_generator", None) is not None)
        self.seeds = (quant.policy_of(state.model).seed, lin.mx_generator.initial_seed())


def test_stochastic_rounding_is_seeded_by_the_run_seed(tmp_path):
    prec = PrecisionConfig(w="fp8_e4m3", a="fp8_e4m3", rounding="stochastic")
    for seed in (3, 4):  # the seeds of a sweep get their own rounding noise, not all seed 0's
        probe = SeedProbe()
        run_task(proxy_run(tmp_path / str(seed), prec, steps=1, seed=seed), extra=(probe,))
        assert probe.seeds == (seed, seed)


def test_schedule_changes_policy_at_its_step(tmp_path):
    sched = [ScheduleEntry(step=10, changes={"w": "fp8_e4m3", "a": "fp8_e4m3"})]
    rec = Recorder()
    summary = run_task(proxy_run(tmp_path, steps=20, schedule=sched), extra=(rec,))
    assert all(rec.policy[s] == "fp32" for s in range(1, 11))  # updates 0..9 → steps 1..10
    assert all(rec.policy[s] == "fp8_e4m3" for s in range(11, 21))
    assert summary["policy_final"]["w"] == "fp8_e4m3" and summary["precision"]["w"] == "fp32"
    rows = {r["step"]: r for r in record.read_metrics(tmp_path)}
    clip_keys = {"clip_ln/blocks.0.norm", "clip_ln/blocks.1.norm", "clip_act/block0", "clip_act/block1"}
    assert not clip_keys & set(rows[10]) and clip_keys <= set(rows[11])
    assert all(0 <= rows[20][k] <= 1 for k in clip_keys)


def test_branch_replays_parent_data_order_and_state(tmp_path):
    parent_rec, same_rec, fp4_rec = Recorder(), Recorder(), Recorder()
    run_task(proxy_run(tmp_path / "parent", ckpt_every=20), extra=(parent_rec,))
    branch = dict(ckpt_every=20, branch_from=str(tmp_path / "parent"), branch_step=20)
    run_task(proxy_run(tmp_path / "same", **branch), extra=(same_rec,))
    fp4 = PrecisionConfig(w="fp4_e2m1", a="fp4_e2m1")
    run_task(proxy_run(tmp_path / "fp4", fp4, **branch), extra=(fp4_rec,))
    parent, same, low = (losses(tmp_path / d) for d in ("parent", "same", "fp4"))
    assert sorted(same) == list(range(21, 41))
    assert all(same[s] == parent[s] for s in same)  # same state + same data → identical losses
    assert same_rec.batches == fp4_rec.batches == {s: parent_rec.batches[s] for s in range(21, 41)}
    assert set(fp4_rec.policy.values()) == {"fp4_e2m1"} and low[21] != parent[21]


class Betas(Callback):
    def __init__(self):
        self.betas = set()

    def on_step_end(self, state, metrics):
        self.betas |= {tuple(g["betas"]) for g in state.optimizer.param_groups}


def test_a_branch_trains_with_its_own_betas_from_its_parents_moments(tmp_path):
    """A branch that changes β2 keeps the parent's weights and Adam moments but steps with its own
    betas (torch's load_state_dict would put the parent's back: that branch trained as its parent)."""
    run_task(proxy_run(tmp_path / "parent", ckpt_every=20))
    branch = dict(ckpt_every=20, branch_from=str(tmp_path / "parent"), branch_step=20)
    probe = Betas()
    run_task(proxy_run(tmp_path / "b95", betas=[0.9, 0.95], **branch), extra=(probe,))
    parent, b95 = losses(tmp_path / "parent"), losses(tmp_path / "b95")
    assert probe.betas == {(0.9, 0.95)}
    assert b95[21] == parent[21] and b95[22] != parent[22]  # same state at 20, another update after it
    # the moments are the parent's: a fresh Adam (zero moments) at step 20 would take another step
    fresh = checkpoint.load(checkpoint.path_for(tmp_path / "b95", 40))["optimizer"]["state"]
    assert all(int(s["step"]) == 40 for s in fresh.values())


def test_the_twin_of_a_beta2_branch_trains_with_the_branchs_betas(tmp_path):
    """The fp32 twin is this run in fp32: after a branch that lowers β2, the twin steps with β2 = 0.95
    too, so its losses are those of the fp32 run branched the same way (the twin's optimizer used to
    load its parent's betas back with torch's load_state_dict, while taking the branch's LR)."""
    fp4 = PrecisionConfig(w="fp4_e2m1", a="fp4_e2m1")
    kw = dict(steps=30, twin_every=5, eval_every=10, ckpt_every=10)
    run_task(proxy_run(tmp_path / "mx", fp4, **kw))
    run_task(proxy_run(tmp_path / "fp32", **kw))
    for name, precision in (("mx", fp4), ("fp32", None)):
        branch = dict(kw, branch_from=str(tmp_path / name), branch_step=10, betas=[0.9, 0.95])
        run_task(proxy_run(tmp_path / f"{name}_b95", precision, **branch))
    twin = {r["step"]: r["twin_loss"] for r in record.read_metrics(tmp_path / "mx_b95") if "twin_loss" in r}
    fp32 = losses(tmp_path / "fp32_b95")
    assert sorted(twin) == [15, 20, 25, 30]
    assert all(twin[s] == fp32[s] for s in twin)
    assert fp32[30] != losses(tmp_path / "fp32")[30]  # β2 0.95 trained differently from the parent


class InfAt(ProxyTask):
    """A proxy whose loss becomes inf on the batch of ``bad_step``."""

    bad_step = 7

    def batch(self, step):
        self.current = step
        return super().batch(step)

    def loss(self, model, batch):
        loss = super().loss(model, batch)
        return loss * float("inf") if self.current == self.bad_step else loss


def test_divergence_is_a_result(tmp_path):
    run = proxy_run(tmp_path, steps=20)
    task = InfAt(run.model, 32, 0, 2)
    summary = train(run, task, default_hooks(run))
    assert summary["status"] == "diverged" and summary["diverged_step"] == 8 and summary["step"] == 7
    assert record.read_summary(tmp_path)["status"] == "diverged"
    with pytest.raises(FileExistsError, match="diverged"):
        train(run, InfAt(run.model, 32, 0, 2), default_hooks(run))


def test_huge_lr_diverges(tmp_path):
    summary = run_task(proxy_run(tmp_path, steps=30, lr=1e6))
    assert summary["status"] == "diverged" and 1 < summary["diverged_step"] <= 30


def test_spike_detector_on_synthetic_losses():
    def run(seq):
        det = SpikeDetector(window=5, threshold=0.05)
        for step, loss in enumerate(seq, start=1):
            det.update(step, loss)
        return det.spike_step, det.recovered

    smooth = [2.0 - 0.02 * i for i in range(50)]  # 2.0 → 1.02
    assert run(smooth) == (None, None)
    spike_then_recover = smooth + [3.0] * 10 + [0.9] * 20
    step, recovered = run(spike_then_recover)
    assert step == 51 and recovered is True  # the first spiked loss already lifts the 5-step mean
    assert run(smooth + [3.0] * 20) == (51, False)
    assert run(smooth + [1.04]) == (None, None)  # a rise below the threshold is not a spike


def test_fp32_twin_is_the_fp32_run(tmp_path):
    """The twin of an MX run is the fp32 run of the same seed, step for step (same init, batches and
    LR), with its own val loss and spike record; an fp32 run has no twin (it would be itself)."""
    fp32, mx = tmp_path / "fp32", tmp_path / "mx"
    s32 = run_task(proxy_run(fp32, steps=10, twin_every=5, eval_every=5))
    fp4 = PrecisionConfig(w="fp4_e2m1", a="fp4_e2m1")
    smx = run_task(proxy_run(mx, fp4, steps=10, twin_every=5, eval_every=5))
    ref = {r["step"]: r for r in record.read_metrics(fp32)}
    assert s32["twin"] is False and not any(k.startswith("twin") for r in ref.values() for k in r)
    rows = [r for r in record.read_metrics(mx) if "twin_cos" in r]
    assert [r["step"] for r in rows] == [5, 10]
    for r in rows:
        assert r["twin_cos"] < 0.999 and r["twin_zeta"] > 1e-4
        assert r["twin_loss"] == ref[r["step"]]["loss"]
        assert r["twin_val_loss"] == ref[r["step"]]["val_loss"]
        # Adam's state, logged for the run and its twin: the twin's is the fp32 run's
        own = {k: v for k, v in ref[r["step"]].items() if k.startswith("adam_")}
        assert set(own) >= {"adam_upd/matrix", "adam_upd/norm", "adam_gv/matrix", "adam_gv_max"}
        assert {k.removeprefix("twin_"): v for k, v in r.items() if k.startswith("twin_adam")} == own
        assert r["adam_upd/matrix"] != own["adam_upd/matrix"]
    assert smx["twin"] is True
    assert smx["twin_final_val_loss"] == s32["final_val_loss"]
    assert smx["twin_final_train_loss"] == s32["final_train_loss"]
    assert smx["twin_spike_step"] == s32["spike_step"] and smx["twin_diverged_step"] is None
    assert smx["median_step_time_with_twin"] > smx["median_step_time"] > 0
    assert smx["median_twin_time"] > 0 and "median_step_time_with_twin" not in s32


def test_done_run_is_not_overwritten(tmp_path):
    run = proxy_run(tmp_path, steps=5)
    run_task(run)
    before = (tmp_path / "summary.json").read_text()
    with pytest.raises(FileExistsError, match="overwrite=true"):
        run_task(run)
    assert (tmp_path / "summary.json").read_text() == before
    again = run_task(run, overwrite=True)
    assert again["status"] == "done" and len(record.read_metrics(tmp_path)) == 5


def test_resume_refuses_a_different_config(tmp_path):
    run_task(proxy_run(tmp_path, steps=10), extra=(StopAt(4),))
    with pytest.raises(FileExistsError, match="unfinished run of another config"):
        run_task(proxy_run(tmp_path, steps=10, lr=1e-2))
    # what a resume may change: the logger and the device (records.NOT_IDENTITY)
    moved = proxy_run(tmp_path, steps=10, device="cuda:1")
    moved.logger = LoggerConfig(wandb=WandbConfig(mode="offline", group="g"))
    record.prepare(tmp_path, moved)
    assert "cuda:1" in (tmp_path / "config.yaml").read_text()
    with pytest.raises(FileExistsError, match="another config"):
        record.prepare(tmp_path, proxy_run(tmp_path, steps=10, autocast="bf16"))


@pytest.mark.parametrize(
    ("make", "field"),
    [
        (lambda: TrainConfig(steps=0), "train.steps"),
        (lambda: TrainConfig(lr=0.0), "train.lr"),
        (lambda: TrainConfig(warmup_frac=1.0), "train.warmup_frac"),
        (lambda: TrainConfig(grad_clip=0.0), "train.grad_clip"),
        (lambda: TrainConfig(branch_from="x"), "train.branch_step"),
        (lambda: TrainConfig(steps=10, schedule=[ScheduleEntry(10, {"w": "bf16"})]), "train.schedule"),
        (lambda: PrecisionConfig(w="fp7"), "precision.w"),
        (lambda: PrecisionConfig(scale_rule="sideways"), "precision.scale_rule"),
        (lambda: RunConfig(task="vision", model=PROXY_CFG), "task"),
        (lambda: RunConfig(task="lm", model=PROXY_CFG), "model"),
        (
            lambda: RunConfig(model=PROXY_CFG, train=TrainConfig(schedule=[ScheduleEntry(1, {"w": "fp7"})])),
            "precision.w",
        ),
        (lambda: RunConfig(model=PROXY_CFG, train=TrainConfig(schedule=[ScheduleEntry(1, {"q": 1})])), "q"),
    ],
)
def test_bad_config_names_the_field(make, field):
    with pytest.raises(ValueError, match=field.replace(".", r"\.")):
        make()


def test_configs_round_trip_through_omegaconf():
    run = RunConfig(
        task="proxy",
        model=PROXY_CFG,
        precision=PrecisionConfig(w="mxfp8_e4m3", exclude=["blocks.0*"]),
        train=TrainConfig(steps=5, schedule=[ScheduleEntry(2, {"a": "bf16"})]),
        out_dir="x",
    )
    back = OmegaConf.to_object(OmegaConf.structured(run))
    assert back == run and isinstance(back.train.schedule[0], ScheduleEntry)
    assert json.loads(json.dumps(checkpoint.policy_to_dict(run.precision.policy())))["exclude"] == [
        "blocks.0*"
    ]


def test_lm_task_accounting():
    task = LMTask(LM_CFG, ToyTokens(), eval_batches=2)
    assert task.tokens_per_step == 256 and task.flops_per_step == 6 * LM_CFG.n_params * 256
    model = task.build(0)
    assert torch.isfinite(task.loss(model, task.batch(0)))
    from train.data import DataConfig

    run = lm_run("x")
    assert run.data == DataConfig()  # the LM task's data schema fills in a run given none (train.tasks)
    run.data = None  # emptied after construction
    with pytest.raises(ValueError, match="needs data"):
        make_task(run)


def test_lm_on_the_data_module(tmp_path):
    from train.data import DataConfig

    run = lm_run(tmp_path, steps=10, eval_every=5)
    run.data = DataConfig(source="synthetic", seq_len=32, synthetic_bytes=8192)
    summary = train(run, make_task(run), default_hooks(run))
    assert summary["status"] == "done" and summary["D"] == 10 * 8 * 32
    assert OmegaConf.load(tmp_path / "config.yaml").data.source == "synthetic"


class Broken(ProxyTask):
    def loss(self, model, batch):
        raise RuntimeError("boom")


def test_crash_is_recorded_as_failed_and_reraised(tmp_path):
    run = proxy_run(tmp_path, steps=5)
    with pytest.raises(RuntimeError, match="boom"):
        train(run, Broken(run.model, 32, 0, 2), default_hooks(run))
    summary = record.read_summary(tmp_path)
    assert summary["status"] == "failed" and "boom" in summary["error"]
    assert signal.getsignal(signal.SIGUSR1) is signal.SIG_DFL  # the Checkpointer put handlers back


def test_the_hooks_order_is_declared_and_checked(tmp_path):
    """Hooks read what earlier hooks produced at the same step (MetricsLogger's row, the Evaluator's
    val_loss); that order is declared (``Callback.after``) and a list that breaks it is refused before
    anything is written, instead of silently logging rows without them."""
    from train.callbacks import check_order

    run = proxy_run(tmp_path / "r", steps=2)
    hooks = default_hooks(run)
    check_order(hooks)  # the default order is valid
    names = [h.name for h in hooks]
    wandb, metrics = names.index("WandbLogger"), names.index("MetricsLogger")
    hooks[wandb], hooks[metrics] = hooks[metrics], hooks[wandb]
    with pytest.raises(ValueError, match="WandbLogger must come after MetricsLogger"):
        train(run, make_task(run), hooks)
    assert not (tmp_path / "r").exists()


def test_a_run_killed_after_its_last_checkpoint_resumes_into_the_same_summary(tmp_path):
    """Killed after the checkpoint of its last step but before summary.json (found by
    tests/faults/test_kill.py): the relaunch, with no step left to run, wrote the previous eval's
    final_val_loss, no final_train_loss and no median step time. The Evaluator recorded its value
    after the Checkpointer had saved; the loop's last loss and the step times were not checkpointed."""
    run = proxy_run(tmp_path / "r", steps=10, eval_every=5, ckpt_every=5, twin_every=5)
    before = run_task(run)
    (tmp_path / "r" / "summary.json").unlink()  # what a SIGKILL between the two writes leaves
    after = run_task(proxy_run(tmp_path / "r", steps=10, eval_every=5, ckpt_every=5, twin_every=5))
    timing = {"wall_time", "wall_time_total", "median_step_time", "median_step_time_with_twin"}
    assert {k: v for k, v in after.items() if k not in timing} == {
        k: v for k, v in before.items() if k not in timing
    }
    assert after["final_train_loss"] is not None and after["median_step_time"] == before["median_step_time"]
