"""The one training loop, for every task: ``train(run, task, hooks) -> summary``.

Each update: apply any precision-schedule entry due at this step (``quant.set_policy``), set the LR,
draw ``task.batch(step)``, compute the loss (non-finite → stop as ``diverged``: a result, not a
crash), backward, clip, optimizer step, then call each hook's ``on_step_end`` in order. Everything
else (evaluation, metrics, checkpoints, spikes, the fp32 twin) lives in hooks (``train.hooks``).

Start-up resolves where to begin: the run directory's own latest checkpoint (resume, policy as
saved), else ``train.branch_from`` at ``train.branch_step`` (same weights, optimizer state, RNG and
data position as the parent, but this run's precision), else a fresh model from ``train.seed``.

Optimizer: AdamW with decoupled decay on Linear matrices only (never norms, embeddings or biases);
betas and LR schedule default to the task's (LM: (0.9, 0.95), warm-up + cosine to min_lr_frac·lr;
proxy: (0.9, 0.999), constant). The schedule is a pure function of the step.

Device and precision: the model lives on ``train.device``; with ``train.autocast=bf16`` every forward
pass (train and eval) runs under ``torch.autocast(bf16)`` while parameters and optimizer state stay
fp32. Multi-process (``torchrun``; see ``train.distributed``): the model is wrapped in DDP after
``quant.convert``, the logged loss is the mean over ranks, and only rank 0 runs the hooks that write
(those without ``all_ranks = True``) and writes the run record. Hooks may define
``on_summary(state, summary)``, called after summary.json is written (e.g. to upload it).
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import random
import sys
import time
from collections.abc import Iterator, Sequence
from typing import Any

import torch
import torch.nn as nn

import quant
from records import run as record
from train import checkpoint, distributed
from train.callbacks import State, check_order
from train.config import RunConfig
from train.distributed import autocast
from train.optim import lr_at, make_optimizer, set_lr
from train.tasks import TASKS, Task, task_spec


def check_device(device: str) -> None:
    """A one-line ValueError if ``device`` is not usable on this machine."""
    dev = torch.device(device)
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            raise ValueError(f"train.device={device!r} but no CUDA device is available; use train.device=cpu")
        if dev.index is not None and dev.index >= torch.cuda.device_count():
            raise ValueError(f"train.device={device!r}: only {torch.cuda.device_count()} CUDA device(s)")


@contextlib.contextmanager
def _process_group(run: RunConfig) -> Iterator[tuple[int, int]]:
    owned = distributed.setup(run.train.device)
    try:
        yield distributed.rank(), distributed.world_size()
    finally:
        if owned:
            distributed.teardown()


def train(run: RunConfig, task: Task, hooks: Sequence[Any] = (), *, overwrite: bool = False) -> dict:
    """Train ``run`` (resuming or branching as configured) and return the summary (also written
    to ``<out_dir>/summary.json``). Hooks run in the given order, which must respect each hook's
    ``after`` (``train.callbacks.check_order``); put the Checkpointer last.

    Under ``torchrun`` (``WORLD_SIZE > 1``) every rank calls this with its own task (its data
    shard); the process group is created here if it does not exist yet."""
    started = time.time()
    check_order(hooks)
    check_device(distributed.resolve_device(run.train.device))
    with _process_group(run) as (rank, world):
        if world > 1:
            if not task_spec(run.task).distributed or run.train.twin_every:
                tasks = ", ".join(n for n, s in TASKS.items() if s.distributed)
                raise ValueError(f"multi-process training supports task={tasks} without the fp32 twin")
            run.out_dir = distributed.broadcast(run.out_dir)  # e.g. a timestamp resolved per rank
        if rank == 0:
            record.prepare(run.out_dir, run, overwrite)
        distributed.barrier()  # no rank looks for checkpoints while rank 0 may be clearing the folder
        return _train(run, task, hooks, started, record.read_summary(run.out_dir))


def _train(run: RunConfig, task: Task, hooks: Sequence[Any], started: float, previous: dict | None) -> dict:
    cfg, rank, world = run.train, distributed.rank(), distributed.world_size()
    torch.manual_seed(cfg.seed)
    random.seed(cfg.seed)
    model = task.build(cfg.seed)
    policy = run.precision.policy(seed=cfg.seed)  # each seed of a sweep its own rounding noise
    quant.convert(model, policy)
    hooks = [h for h in hooks if rank == 0 or getattr(h, "all_ranks", False)]
    opt = make_optimizer(model, cfg, task)
    ctx = State(run, task, model, opt, policy, hooks, train_model=model, rank=rank, world_size=world)
    if world > 1:
        from torch.nn.parallel import DistributedDataParallel

        ids = [model_device(model).index] if model_device(model).type == "cuda" else None
        ctx.train_model = DistributedDataParallel(model, device_ids=ids)
    try:
        for h in hooks:
            h.on_train_start(ctx)
        _start(ctx)
        _loop(ctx)
        if ctx.status == "running":
            ctx.status = "done" if ctx.step >= cfg.steps else (ctx.stop or "interrupted")
    except BaseException as exc:  # recorded, then re-raised: a crash is never a silent result
        ctx.status = "failed" if isinstance(exc, Exception) else "interrupted"
        ctx.extra["error"] = f"{type(exc).__name__}: {exc}"
        raise
    finally:
        for h in hooks:
            h.on_train_end(ctx)
        summary = _summary(ctx, time.time() - started, previous)
        if ctx.is_main:
            record.write_summary(run.out_dir, summary)
        for h in hooks:
            if hasattr(h, "on_summary"):
                h.on_summary(ctx, summary)
    return summary


def model_device(model: nn.Module) -> torch.device:
    return next(model.parameters()).device


def _start(ctx: State) -> None:
    cfg, out = ctx.run.train, ctx.run.out_dir
    if ctx.is_main:
        checkpoint.remove_stale_temporaries(out)
    state, own, skipped = checkpoint.latest_intact(out)
    for why in skipped if ctx.is_main else ():
        print(f"resume: {why}; passing over it", file=sys.stderr, flush=True)
    if skipped and ctx.is_main:
        where = f"from {own.name}" if own is not None else "from step 0 (no intact checkpoint)"
        print(f"resume: {where}", file=sys.stderr, flush=True)
    if own is not None:
        ctx.policy = checkpoint.policy_from_dict(state["policy"])
    elif cfg.branch_from is not None:
        path = checkpoint.path_for(cfg.branch_from, cfg.branch_step)
        if not path.exists():
            have = sorted(checkpoint.available(cfg.branch_from))
            raise FileNotFoundError(f"train.branch_step={cfg.branch_step}: no checkpoint {path}; have {have}")
        state = checkpoint.load(path)
        ctx.policy = ctx.run.precision_at(cfg.branch_step).policy(seed=cfg.seed)
    else:
        if ctx.is_main:
            record.truncate_metrics(out, 0)
        return
    checkpoint.restore(state, ctx.model, ctx.optimizer)
    quant.set_policy(ctx.model, ctx.policy)
    checkpoint.restore_sr_generator(state, ctx.model)
    ctx.step = int(state["step"])
    for h in ctx.hooks:
        if checkpoint.hook_name(h) in state["hooks"]:
            h.load_state_dict(state["hooks"][checkpoint.hook_name(h)])
    if own is not None:  # a branch starts its own loss record; checkpoints before it had none
        ctx.last_loss = state["hooks"].get(checkpoint.LOOP_KEY, {}).get("last_loss")
    if ctx.is_main:
        record.truncate_metrics(out, ctx.step)


def _loop(ctx: State) -> None:
    run, cfg, task, model, opt = ctx.run, ctx.run.train, ctx.task, ctx.model, ctx.optimizer
    changes_at = {e.step for e in cfg.schedule}
    clip = cfg.grad_clip if cfg.grad_clip is not None else math.inf
    model.train()
    while ctx.step < cfg.steps and ctx.stop is None:
        step = ctx.step
        if step in changes_at:
            ctx.policy = run.precision_at(step).policy(seed=cfg.seed)
            quant.set_policy(model, ctx.policy)
        lr = lr_at(cfg, task, step)
        set_lr(opt, lr)
        tic = time.perf_counter()
        ctx.batch = task.batch(step)
        opt.zero_grad(set_to_none=True)
        with autocast(run):
            loss = task.loss(ctx.train_model, ctx.batch)
        value = distributed.mean(loss.detach()) if ctx.world_size > 1 else loss.item()
        if not math.isfinite(value):  # the same verdict on every rank (the mean is shared)
            ctx.status, ctx.diverged_step = "diverged", step + 1
            return
        loss.backward()
        grad_norm = float(torch.nn.utils.clip_grad_norm_(model.parameters(), clip))
        opt.step()
        ctx.step, ctx.last_loss = step + 1, value
        metrics = {"loss": value, "lr": lr, "grad_norm": grad_norm, "step_time": time.perf_counter() - tic}
        for h in ctx.hooks:
            h.on_step_end(ctx, metrics)
        if "val_loss" in metrics:
            for h in ctx.hooks:
                h.on_eval(ctx, metrics)


def _summary(ctx: State, wall: float, previous: dict | None) -> dict:
    run, task = ctx.run, ctx.task
    carried = previous.get("wall_time_total", 0.0) if previous and ctx.step > 0 else 0.0
    summary = {
        "status": ctx.status,
        "task": run.task,
        "step": ctx.step,
        "steps": run.train.steps,
        "diverged_step": ctx.diverged_step,
        "final_train_loss": ctx.last_loss,
        "final_val_loss": None,
        "min_val_loss": None,
        "N": task.n_params,
        "D": ctx.step * task.tokens_per_step,
        "C": ctx.step * task.flops_per_step,
        "flops_convention": "6ND",
        "world_size": ctx.world_size,
        "precision": dataclasses.asdict(run.precision),
        "policy_final": checkpoint.policy_to_dict(ctx.policy),
        "spike_step": None,
        "recovered": None,
        "median_step_time": None,
        "wall_time": wall,
        "wall_time_total": carried + wall,
        **ctx.extra,
    }
    for h in ctx.hooks:
        if hasattr(h, "summary"):
            summary.update(h.summary())
    summary.update(record.environment())
    # Which quantizer code ran (bit-identical by design, but a GPU run's eager and compiled kernels are
    # checked separately by benchmarks/gpu_check.py): part of where the record's bits came from.
    summary["quant_backend"] = quant.get_backend()
    return summary
