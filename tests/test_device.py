"""Devices and bf16 autocast: train.autocast=bf16 trains the LM (unquantized and MX) with fp32 master
weights, the quantized matmul's forward and backward GEMMs run in bf16 under autocast, config
validation, and (only where a GPU exists) the same on CUDA."""

from __future__ import annotations

import pytest
import torch

import quant
from models import LMConfig
from quant.mx import QuantSpec, quantize_spec
from quant.ops import MatmulSpecs, qlinear
from records import run as record
from train.callbacks import Callback
from train.config import LoggerConfig, PrecisionConfig, RunConfig, TrainConfig, WandbConfig
from train.data import DataConfig
from train.hooks import default_hooks
from train.loop import check_device, train
from train.tasks import make_task

CPU_BF16 = torch.amp.is_autocast_available("cpu")


pytestmark = pytest.mark.usefixtures("one_thread")


def lm_run(out, precision: PrecisionConfig, **train_kw) -> RunConfig:
    kw = dict(steps=12, batch_size=8, lr=1e-2, eval_every=6, eval_batches=2, spike_window=4)
    run = RunConfig(
        task="lm",
        model=LMConfig(depth=1, vocab_size=256),
        precision=precision,
        train=TrainConfig(**{**kw, **train_kw}),
        out_dir=str(out),
        logger=LoggerConfig(wandb=WandbConfig(mode="disabled")),
    )
    run.data = DataConfig(source="synthetic", seq_len=32, synthetic_bytes=8192)
    return run


class Dtypes(Callback):
    """Records the dtype of the head's output (the logits) and of the parameters."""

    def __init__(self):
        self.logits, self.params = set(), set()

    def on_train_start(self, state):
        state.model.head.register_forward_hook(lambda m, a, out: self.logits.add(out.dtype))

    def on_step_end(self, state, metrics):
        self.params |= {p.dtype for p in state.model.parameters()}
        self.params |= {s.dtype for st in state.optimizer.state.values() for s in st.values() if s.ndim}


PRECISIONS = {
    "fp32": PrecisionConfig(),
    "hybrid": PrecisionConfig(w="fp8_e4m3", a="bf16"),
    "full_mx": PrecisionConfig(w="fp8_e4m3", a="fp8_e4m3", g_dgrad="fp8_e4m3", g_wgrad="fp8_e4m3"),
}


@pytest.mark.skipif(not CPU_BF16, reason="this torch has no CPU bf16 autocast")
@pytest.mark.parametrize("name", list(PRECISIONS))
def test_bf16_autocast_trains_with_fp32_master_weights(tmp_path, name):
    seen = Dtypes()
    bf16 = lm_run(tmp_path / "bf16", PRECISIONS[name], autocast="bf16")
    summary = train(bf16, make_task(bf16), [seen, *default_hooks(bf16)])
    assert summary["status"] == "done"
    assert seen.logits == {torch.bfloat16} and seen.params == {torch.float32}
    fp32 = lm_run(tmp_path / "fp32", PRECISIONS[name])
    train(fp32, make_task(fp32), default_hooks(fp32))
    a, b = record.read_metrics(tmp_path / "bf16"), record.read_metrics(tmp_path / "fp32")
    assert a[-1]["loss"] < a[0]["loss"] - 1.0  # it learns
    assert a[0]["loss"] != b[0]["loss"] and a[0]["loss"] == pytest.approx(b[0]["loss"], rel=2e-2)
    assert a[-1]["val_loss"] == pytest.approx(b[-1]["val_loss"], rel=0.1)


@pytest.mark.skipif(not CPU_BF16, reason="this torch has no CPU bf16 autocast")
def test_quantized_linear_under_autocast_runs_its_gemms_in_bf16():
    """Forward: Q(x)·Q(W)ᵀ with the quantized operands cast to bf16; backward (which autocast does not
    reach) likewise in bf16, with gradients returned in the fp32 of the inputs."""
    g = torch.Generator().manual_seed(0)
    x = torch.randn(64, 96, generator=g, requires_grad=True)
    w = torch.randn(48, 96, generator=g, requires_grad=True)
    specs = MatmulSpecs.linear(quant.QuantPolicy(w="fp8_e4m3", a="fp8_e4m3", g_dgrad="fp8_e5m2"))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        y = qlinear(x, w, None, specs)
    dy = torch.randn(64, 48, generator=g).bfloat16()
    y.backward(dy)
    assert y.dtype == torch.bfloat16 and x.grad.dtype == w.grad.dtype == torch.float32

    def q(t, spec: QuantSpec, axis: int) -> torch.Tensor:
        return quantize_spec(t.detach(), spec, axis=axis).bfloat16()

    wt = w.detach().t()
    torch.testing.assert_close(y, q(x, specs.a, -1) @ q(wt, specs.b, -2), rtol=0, atol=0)
    dx = (q(dy, specs.g_dgrad, -1) @ q(wt, specs.b_bwd, -1).mT).float()
    dw = (q(x, specs.a_bwd, -2).mT @ q(dy, specs.g_wgrad, -2)).float().t()
    torch.testing.assert_close(x.grad, dx, rtol=0, atol=0)
    torch.testing.assert_close(w.grad, dw, rtol=0, atol=0)


def test_device_and_autocast_validation():
    for bad, field in (
        (dict(device="gpu"), "train.device"),
        (dict(device="cpu:0"), "train.device"),
        (dict(device="cuda:x"), "train.device"),
        (dict(autocast="fp16"), "train.autocast"),
    ):
        with pytest.raises(ValueError, match=field.replace(".", r"\.")):
            TrainConfig(**bad)
    TrainConfig(device="cuda:1", autocast="bf16")  # valid anywhere: checked when training starts
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match="no CUDA device"):
            check_device("cuda")


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("name", list(PRECISIONS))
def test_cuda_bf16_autocast(tmp_path, name):
    seen = Dtypes()
    run = lm_run(tmp_path, PRECISIONS[name], device="cuda", autocast="bf16")
    summary = train(run, make_task(run), [seen, *default_hooks(run)])
    rows = record.read_metrics(tmp_path)
    assert summary["status"] == "done" and rows[-1]["loss"] < rows[0]["loss"] - 1.0
    assert seen.logits == {torch.bfloat16} and seen.params == {torch.float32}
