"""Hooks: everything the loop does besides the update, each an object with its own cadence.

A hook implements any of ``on_train_start(state)``, ``on_step_end(state, metrics)`` (add keys to
``metrics`` to have later hooks see them), ``on_eval(state, metrics)``, ``on_train_end(state)``;
optionally ``state_dict()``/``load_state_dict(d)`` (saved in checkpoints, keyed by ``name``),
``summary() -> dict`` (merged into summary.json) and ``on_summary(state, summary)`` (after it is
written). Order matters; ``default_hooks`` gives

    Evaluator → Fp32Twin → SpikeDetector → MetricsLogger → WandbLogger → Checkpointer

(the twin after the Evaluator, so it evaluates itself at the same steps).

so the loggers see val loss and twin metrics, and the checkpoint sees every hook's latest state.

Multi-process: only rank 0 runs a hook unless it sets ``all_ranks = True`` (the Evaluator, whose
loss is averaged over the ranks' validation shards, and the Checkpointer, which agrees on a stop
across ranks; rank 0 alone writes the checkpoint).
"""

from __future__ import annotations

import copy
import math
import signal
import statistics
import sys
import threading
import time
from collections import deque
from typing import Any

import torch
import torch.nn as nn

import quant
from quant import QuantPolicy
from records import run as record
from train import checkpoint, distributed
from train.callbacks import Callback, State
from train.config import RunConfig
from train.distributed import autocast
from train.optim import adam_stats, lr_at, make_optimizer, param_kinds, set_lr


def _due(step: int, every: int, last: int) -> bool:
    return step == last or (every > 0 and step % every == 0)


@torch.no_grad()
def evaluate(state: State, model: nn.Module | None = None) -> float:
    """Mean validation loss of ``model`` (default: the trained model; the fp32 twin passes its own)
    under the run's autocast, averaged over ranks under DDP; the stochastic-rounding generator is
    left as it was."""
    model = state.model if model is None else model
    gen = checkpoint._sr_generator(model)
    saved = gen.get_state() if gen is not None else None
    model.eval()
    with autocast(state.run):
        losses = [float(state.task.loss(model, b)) for b in state.task.val_batches()]
    model.train()
    if gen is not None:
        gen.set_state(saved)
    mean = sum(losses) / len(losses)
    return distributed.mean(mean) if state.world_size > 1 else mean


class Evaluator(Callback):
    """``val_loss`` every ``every`` steps and at the last step."""

    all_ranks = True

    def __init__(self, every: int):
        self.every, self.final, self.best = every, None, None

    def on_step_end(self, state: State, metrics: dict[str, Any]) -> None:
        if _due(state.step, self.every, state.run.train.steps):
            metrics["val_loss"] = self.final = evaluate(state)
            # Recorded here, not in on_eval (which runs after every hook's on_step_end): the
            # Checkpointer saves this step's state, so a run killed after its last checkpoint and
            # before its summary resumes with this step's val loss, not the previous eval's.
            if math.isfinite(self.final) and (self.best is None or self.final < self.best):
                self.best = self.final

    def state_dict(self) -> dict:
        return {"final": self.final, "best": self.best}

    def load_state_dict(self, d: dict) -> None:
        self.final, self.best = d["final"], d["best"]

    def summary(self) -> dict:
        return {"final_val_loss": self.final, "min_val_loss": self.best}


def _blocked(policy: QuantPolicy, role: str) -> bool:
    return policy.spec(role).block_size is not None


class MetricsLogger(Callback):
    """Appends one metrics.jsonl line every ``every`` steps (and on eval/last/stop steps): losses, LR,
    grad norm, LN-γ clip fraction per layer, activation clip fraction per block (activation format,
    from forward hooks on ``model.blocks``), Adam's normalized step and gradient-to-memory ratio per
    kind of parameter (``adam_upd/*``, ``adam_gv/*``: ``train.optim.adam_stats``), tokens, FLOPs,
    step time, epoch.

    ``clip_ln/*`` is computed with the spec γ is really quantized with (``norm_affine`` and
    ``norm_scale_rule``) when that is a block format; otherwise, as a diagnostic of what *would*
    clip, with the weight format. The summary's ``clip_ln_spec`` says which."""

    after = ("Evaluator", "Fp32Twin")  # their val_loss and twin_* metrics go into the row

    def __init__(self, every: int = 1):
        self.every, self.step_times, self._acts, self._handles = every, [], {}, []
        self.with_twin: list[float] = []
        self.clip_ln_spec: str | None = None
        self.kinds: dict[int, str] = {}

    def on_train_start(self, state: State) -> None:
        self.kinds = param_kinds(state.model)
        for i, block in enumerate(getattr(state.model, "blocks", ())):
            self._handles.append(block.register_forward_hook(self._keeper(i)))

    def _keeper(self, i: int):
        def hook(module: nn.Module, args: Any, output: torch.Tensor) -> None:
            if module.training:
                self._acts[i] = output.detach()

        return hook

    def on_step_end(self, state: State, metrics: dict[str, Any]) -> None:
        self.step_times.append(metrics["step_time"])
        if "twin_time" in metrics:
            self.with_twin.append(metrics["step_time"] + metrics["twin_time"])
        state.row = None
        s, task = state.step, state.task
        if not (_due(s, self.every, state.run.train.steps) or "val_loss" in metrics or state.stop):
            return
        row = {"step": s, **metrics, "tokens": s * task.tokens_per_step, "flops": s * task.flops_per_step}
        row["epoch"] = task.epoch(s)
        row.update(self._clipping(state))
        row.update(adam_stats(state.optimizer, self.kinds))
        record.append_metrics(state.run.out_dir, row)
        state.row = row

    def _clipping(self, state: State) -> dict[str, float]:
        p, out = state.policy, {}
        kw = {"block_size": p.block_size, "scale": p.scale}
        ln_spec, why = p.norm_spec(), "norm_affine"
        if ln_spec is None or ln_spec.block_size is None:
            ln_spec, why = (p.spec("w"), "weight format, diagnostic") if _blocked(p, "w") else (None, "")
        if ln_spec is not None:
            self.clip_ln_spec = f"{ln_spec.elem.name} {ln_spec.scale.name}-{ln_spec.scale_rule.value} ({why})"
            for name, m in state.model.named_modules():
                if isinstance(m, nn.LayerNorm | nn.RMSNorm) and m.weight is not None:
                    out[f"clip_ln/{name}"] = quant.spec_clip_fraction(m.weight, ln_spec)
        if _blocked(p, "a"):
            for i, act in sorted(self._acts.items()):
                out[f"clip_act/block{i}"] = quant.clip_fraction(act, p.name_of("a"), **kw)
        return out

    def on_train_end(self, state: State) -> None:
        for h in self._handles:
            h.remove()
        self._handles, self._acts = [], {}

    def state_dict(self) -> dict:
        """The step times so far: a resumed run's median covers all of its steps (and a run
        resumed at its last checkpoint, with no step left, still has one)."""
        return {"step_times": list(self.step_times), "with_twin": list(self.with_twin)}

    def load_state_dict(self, d: dict) -> None:
        self.step_times, self.with_twin = list(d["step_times"]), list(d["with_twin"])

    def summary(self) -> dict:
        out = {"median_step_time": statistics.median(self.step_times) if self.step_times else None}
        if self.with_twin:
            out["median_step_time_with_twin"] = statistics.median(self.with_twin)
        if self.clip_ln_spec is not None:
            out["clip_ln_spec"] = self.clip_ln_spec
        return out


class Checkpointer(Callback):
    """Checkpoints every ``every`` steps, at the end of a finished run, and at the first step boundary
    after SIGTERM/SIGUSR1/SIGUSR2 or Ctrl-C (SIGINT; the handler only sets a flag), after which the
    run stops cleanly with status ``interrupted`` (resume by calling ``train`` again). A second
    Ctrl-C stops at once (KeyboardInterrupt), from the last regular checkpoint."""

    SIGNALS = (signal.SIGTERM, signal.SIGUSR1, signal.SIGUSR2, signal.SIGINT)
    all_ranks = True
    after = ("Evaluator", "Fp32Twin", "SpikeDetector", "MetricsLogger", "WandbLogger")  # their state now

    def __init__(self, every: int = 0):
        self.every, self.requested, self._previous, self._saved_at = every, None, {}, None

    def request_stop(self, signum: int = 0, frame: Any = None) -> None:
        if signum == signal.SIGINT:
            if self.requested == signal.SIGINT:  # the second Ctrl-C: now
                signal.signal(signal.SIGINT, signal.default_int_handler)
                raise KeyboardInterrupt
            print("Ctrl-C: checkpointing at the next step, then stopping (Ctrl-C again: stop now)",
                  file=sys.stderr, flush=True)  # fmt: skip
        self.requested = signum or True

    def on_train_start(self, state: State) -> None:
        self.requested = None
        if threading.current_thread() is threading.main_thread():
            for sig in self.SIGNALS:
                self._previous[sig] = signal.signal(sig, self.request_stop)

    def on_step_end(self, state: State, metrics: dict[str, Any]) -> None:
        if state.world_size > 1 and distributed.any_rank(bool(self.requested)):
            self.requested = self.requested or True  # a signal may reach one rank only: all stop here
        if self.requested:
            state.stop = "interrupted"
        if self.requested or (self.every and state.step % self.every == 0):
            checkpoint.save_state(state)
            self._saved_at = state.step

    def on_train_end(self, state: State) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
        self._previous = {}
        if state.status == "done" and self._saved_at != state.step:
            checkpoint.save_state(state)


class SpikeDetector(Callback):
    """First loss spike: the moving average of the train loss over ``window`` steps rises more than
    ``threshold`` above its running minimum. Recovered: the final moving average is back within
    ``threshold`` of the pre-spike minimum."""

    def __init__(self, window: int = 100, threshold: float = 0.008):
        self.window, self.threshold = window, threshold
        self.losses: deque[float] = deque(maxlen=window)
        self.low, self.last, self.spike_step, self.pre_spike_low = math.inf, None, None, None

    def update(self, step: int, loss: float) -> None:
        self.losses.append(loss)
        if len(self.losses) < self.window:
            return
        self.last = sum(self.losses) / self.window
        if self.spike_step is None and self.last > self.low + self.threshold:
            self.spike_step, self.pre_spike_low = step, self.low
        self.low = min(self.low, self.last)

    def on_step_end(self, state: State, metrics: dict[str, Any]) -> None:
        self.update(state.step, metrics["loss"])

    @property
    def recovered(self) -> bool | None:
        if self.spike_step is None or self.last is None:
            return None
        return self.last <= self.pre_spike_low + self.threshold

    def state_dict(self) -> dict:
        return {
            "losses": list(self.losses),
            "low": self.low,
            "last": self.last,
            "spike_step": self.spike_step,
            "pre_spike_low": self.pre_spike_low,
        }

    def load_state_dict(self, d: dict) -> None:
        self.losses = deque(d["losses"], maxlen=self.window)
        self.low, self.last = d["low"], d["last"]
        self.spike_step, self.pre_spike_low = d["spike_step"], d["pre_spike_low"]

    def summary(self) -> dict:
        return {"spike_step": self.spike_step, "recovered": self.recovered}


def _flat_grad(model: nn.Module) -> torch.Tensor:
    grads = [p.grad.reshape(-1) for p in model.parameters() if p.requires_grad and p.grad is not None]
    return torch.cat(grads).double()


class Fp32Twin(Callback):
    """An fp32 copy from the same init, trained alongside on the same batches (its own trajectory):
    a full citizen of the run, with its own train loss, val loss (at every eval step of the run),
    spike detection and divergence step. Every ``every`` steps: ``twin_cos`` = cos(g_mx, g_fp32)
    and ``twin_zeta`` = ‖g_mx − g_fp32‖² / ‖g_fp32‖², the gradients taken at the same step on each
    run's own weights (the notes' ``stab/*``; g_mx is after clipping, which the proxy protocol does
    not use), and the twin's own Adam statistics (``twin_adam_upd/*``, ``twin_adam_gv/*``, as the
    run's). ``twin_time`` (every step) is what the twin adds to a step.

    A run whose policy is fp32 throughout (schedule included) has no twin: it would be itself. A
    twin whose loss turns non-finite stops there (``twin_diverged_step``); the run goes on."""

    def __init__(self, every: int, spike_window: int = 100, spike_threshold: float = 0.008):
        self.every, self.model, self.optimizer = every, None, None
        self.kinds: dict[int, str] = {}
        self.spikes = SpikeDetector(spike_window, spike_threshold)
        self.enabled, self.last_loss, self.diverged_step = True, None, None
        self.final_val, self.best_val = None, None
        self.times: list[float] = []

    def on_train_start(self, state: State) -> None:
        run = state.run
        self.enabled = not all(run.precision_at(s).policy().is_identity for s in _policy_steps(run))
        if not self.enabled:
            return
        self.model = copy.deepcopy(state.model)  # called before any checkpoint is loaded: the init
        quant.set_policy(self.model, QuantPolicy(exclude=state.policy.exclude))
        self.optimizer = make_optimizer(self.model, state.run.train, state.task)
        self.kinds = param_kinds(self.model)

    def on_step_end(self, state: State, metrics: dict[str, Any]) -> None:
        if not self.enabled:
            return
        tic = time.perf_counter()
        cfg, step = state.run.train, state.step - 1
        log = "val_loss" in metrics or (self.every and state.step % self.every == 0)
        if self.diverged_step is None:
            set_lr(self.optimizer, lr_at(cfg, state.task, step))
            self.optimizer.zero_grad(set_to_none=True)
            loss = state.task.loss(self.model, state.batch)
            value = loss.item()
            if not math.isfinite(value):
                self.diverged_step = state.step
            else:
                loss.backward()
                self.last_loss = value
                self.spikes.update(state.step, value)
                if self.every and state.step % self.every == 0:
                    g_mx, g_32 = _flat_grad(state.model), _flat_grad(self.model)
                    metrics["twin_cos"] = float(torch.dot(g_mx, g_32) / (g_mx.norm() * g_32.norm()))
                    metrics["twin_zeta"] = float((g_mx - g_32).square().sum() / g_32.square().sum())
                if cfg.grad_clip is not None:
                    torch.nn.utils.clip_grad_norm_(self.model.parameters(), cfg.grad_clip)
                self.optimizer.step()
                if log:
                    metrics.update(adam_stats(self.optimizer, self.kinds, prefix="twin_adam"))
            if log:
                metrics["twin_loss"] = value
        if "val_loss" in metrics:
            val = evaluate(state, self.model) if self.diverged_step is None else math.nan
            metrics["twin_val_loss"] = val
            self.final_val = val
            if math.isfinite(val) and (self.best_val is None or val < self.best_val):
                self.best_val = val
        metrics["twin_time"] = time.perf_counter() - tic
        self.times.append(metrics["twin_time"])

    def state_dict(self) -> dict | None:
        if not self.enabled:
            return None
        return {
            "model": self.model.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "spikes": self.spikes.state_dict(),
            "last_loss": self.last_loss,
            "diverged_step": self.diverged_step,
            "final_val": self.final_val,
            "best_val": self.best_val,
        }

    def load_state_dict(self, d: dict) -> None:
        if not self.enabled:  # e.g. a branch to fp32 from a parent that had a twin
            return
        self.model.load_state_dict(d["model"])
        # the twin trains with this run's optimizer settings: a branch that lowers β2 lowers its twin's
        checkpoint.load_optimizer_state(self.optimizer, d["optimizer"])
        if "spikes" in d:  # checkpoints written before the twin had its own record
            self.spikes.load_state_dict(d["spikes"])
            self.last_loss, self.diverged_step = d["last_loss"], d["diverged_step"]
            self.final_val, self.best_val = d["final_val"], d["best_val"]

    def summary(self) -> dict:
        if not self.enabled:
            return {"twin": False}
        return {
            "twin": True,
            "twin_final_train_loss": self.last_loss,
            "twin_final_val_loss": self.final_val,
            "twin_min_val_loss": self.best_val,
            "twin_diverged_step": self.diverged_step,
            "twin_spike_step": self.spikes.spike_step,
            "twin_recovered": self.spikes.recovered,
            "median_twin_time": statistics.median(self.times) if self.times else None,
        }


def _policy_steps(run: RunConfig) -> list[int]:
    """The steps at which the run's precision can change (0 and each schedule entry)."""
    return [0, *(e.step for e in run.train.schedule)]


class ConsoleProgress(Callback):
    """nanoGPT-style progress on stderr for a single run: a line at most every ``every_s`` seconds
    and at the last step, ``step 120/451 | loss 2.345 | val 2.401 | lr 3.00e-03 | 12.3k tok/s |
    ETA 0:42``. Time-based, not step-based: a line every 10 s whatever the model's speed."""

    after = ("Evaluator",)  # its val_loss

    def __init__(self, every_s: float = 10.0, clock: Any = time.monotonic):
        self.every_s, self.clock = every_s, clock
        self.last_print = self.start = 0.0
        self.first_step = 0
        self.val: float | None = None

    def on_train_start(self, state: State) -> None:
        self.start = self.last_print = self.clock()
        self.first_step = state.step  # a resumed run: its speed counts from here

    def on_step_end(self, state: State, metrics: dict[str, Any]) -> None:
        if "val_loss" in metrics:
            self.val = metrics["val_loss"]
        now, total = self.clock(), state.run.train.steps
        if not (now - self.last_print >= self.every_s or state.step == total or state.stop):
            return
        self.last_print = now
        done = max(state.step - self.first_step, 1)
        per_step = (now - self.start) / done
        eta = int(per_step * (total - state.step))
        tps = state.task.tokens_per_step / per_step if per_step > 0 else math.inf
        parts = [f"step {state.step}/{total}", f"loss {metrics.get('loss', math.nan):.4g}"]
        if self.val is not None:
            parts.append(f"val {self.val:.4g}")
        parts += [
            f"lr {metrics.get('lr', math.nan):.2e}",
            f"{_si(tps)} tok/s",
            f"ETA {eta // 60}:{eta % 60:02d}",
        ]
        print(" | ".join(parts), file=sys.stderr, flush=True)


def _si(x: float) -> str:
    for unit, scale in (("M", 1e6), ("k", 1e3)):
        if abs(x) >= scale:
            return f"{x / scale:.3g}{unit}"
    return f"{x:.3g}"


def default_hooks(run: RunConfig) -> list[Callback]:
    """The standard hooks of a run, in the order they must run."""
    t = run.train
    hooks: list[Callback] = [Evaluator(t.eval_every)]
    if t.twin_every:
        hooks.append(Fp32Twin(t.twin_every, t.spike_window, t.spike_threshold))
    from train.wandb_logger import WandbLogger  # imports wandb's settings only; wandb itself on use

    hooks += [
        SpikeDetector(t.spike_window, t.spike_threshold),
        MetricsLogger(t.log_every),
        WandbLogger(run.logger.wandb),
        Checkpointer(t.ckpt_every),
    ]
    return hooks
