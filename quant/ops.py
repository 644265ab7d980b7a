"""Quantized training ops: one autograd Function for every quantized GEMM, plus norms and vector ops.

``qmatmul(a, b, specs)`` computes a @ b with each operand fake-quantized along the reduction axis of
each of the three GEMMs it takes part in (see ``quant.policy``):

    forward  y  = Q(a, ·, axis -1) @ Q(b, ·, axis -2)        reduction over a's last / b's rows
    dgrad    da = Q(dy, g_dgrad, -1) @ Q(b, b_bwd, -1)ᵀ       reduction over b's columns
    wgrad    db = Q(a, a_bwd, -2)ᵀ @ Q(dy, g_wgrad, -2)       reduction over the token axis

A Linear is qmatmul(x, Wᵀ) + bias with x flattened to (tokens, in_features): then b = Wᵀ blocked
along -2 is W blocked along in_features, and along -1 it is W blocked along out_features. Attention
(QKᵀ, PV) uses the same function with batch dims. The GEMMs themselves run in the input dtype: the
emulation is of the *values* an MX GEMM would consume; accumulation is fp32 as in hardware.

The high-precision operands are saved for backward (as nn.Linear saves them) and each backward
operand is quantized from them afresh, never from the already quantized forward copy. One exception
computes the same values with less work: a format rounded value by value and deterministically (bf16,
fp16; ``_same_values``) gives the same result along any axis, so when the backward spec equals the
forward one the forward's rounded copy is saved and used as is, and a gradient with the same such
spec for dgrad and wgrad is rounded once (a bf16 step rounds 3 tensors per GEMM instead of 6).

Norm affine parameters go through a straight-through fake-quant (forward Q(γ), backward identity),
so γ's gradient is the one the quantized forward implies.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn as nn

from quant.formats import Rounding
from quant.mx import QuantSpec, quantize_spec
from quant.policy import QuantPolicy

_BF16 = QuantSpec.make("bf16")


@dataclass(frozen=True)
class MatmulSpecs:
    """The six operand specs of one quantized matmul (forward a, b; backward a, b; two grads)."""

    a: QuantSpec
    b: QuantSpec
    a_bwd: QuantSpec
    b_bwd: QuantSpec
    g_dgrad: QuantSpec
    g_wgrad: QuantSpec

    @property
    def is_identity(self) -> bool:
        return all(getattr(self, f).is_identity for f in self.__dataclass_fields__)

    @classmethod
    def linear(cls, p: QuantPolicy) -> MatmulSpecs:
        return cls(p.spec("a"), p.spec("w"), p.spec("a_bwd"), p.spec("w_bwd"),
                   p.spec("g_dgrad"), p.spec("g_wgrad"))  # fmt: skip

    @classmethod
    def attention(cls, p: QuantPolicy) -> MatmulSpecs:
        a, a_bwd = p.spec("a"), p.spec("a_bwd")
        return cls(a, a, a_bwd, a_bwd, p.spec("g_dgrad"), p.spec("g_wgrad"))


class _QMatmul(torch.autograd.Function):
    """Under ``torch.autocast`` the operands are quantized in their own dtype and the forward GEMM
    runs in the autocast dtype; backward (which autocast does not reach) runs its GEMMs in that same
    dtype and returns gradients in the inputs' dtypes. Without autocast every cast is a no-op."""

    @staticmethod
    def forward(ctx, a, b, specs: MatmulSpecs, gen: torch.Generator | None):
        qa = quantize_spec(a, specs.a, axis=-1, generator=gen)
        qb = quantize_spec(b, specs.b, axis=-2, generator=gen)
        # Saved: the forward's rounded copy where it equals the backward operand (see the docstring).
        ctx.reuse = (_same_values(specs.a, specs.a_bwd), _same_values(specs.b, specs.b_bwd))
        ctx.save_for_backward(qa if ctx.reuse[0] else a, qb if ctx.reuse[1] else b)
        ctx.specs, ctx.gen = specs, gen
        y = torch.matmul(qa, qb)
        ctx.gemm_dtype = y.dtype
        return y

    @staticmethod
    def backward(ctx, dy):
        a, b = ctx.saved_tensors
        s, gen, dt = ctx.specs, ctx.gen, ctx.gemm_dtype
        reuse_a, reuse_b = ctx.reuse
        da = db = None
        dy_dgrad = None
        if ctx.needs_input_grad[0]:
            dy_dgrad = quantize_spec(dy, s.g_dgrad, axis=-1, generator=gen)
            da = torch.matmul(
                dy_dgrad.to(dt),
                (b if reuse_b else quantize_spec(b, s.b_bwd, axis=-1, generator=gen)).to(dt).mT,
            ).to(a.dtype)
        if ctx.needs_input_grad[1]:
            same = dy_dgrad is not None and _same_values(s.g_dgrad, s.g_wgrad)
            db = torch.matmul(
                (a if reuse_a else quantize_spec(a, s.a_bwd, axis=-2, generator=gen)).to(dt).mT,
                (dy_dgrad if same else quantize_spec(dy, s.g_wgrad, axis=-2, generator=gen)).to(dt),
            ).to(b.dtype)
        return da, db, None, None


def _same_values(fwd: QuantSpec, bwd: QuantSpec) -> bool:
    """Whether ``bwd`` along any axis gives exactly ``fwd``'s values: the same spec, rounded value by
    value (no blocks, so the axis does not matter) and deterministically (stochastic rounding draws
    fresh noise per call)."""
    return fwd == bwd and fwd.block_size is None and fwd.rounding is not Rounding.STOCHASTIC


def qmatmul(
    a: torch.Tensor, b: torch.Tensor, specs: MatmulSpecs, generator: torch.Generator | None = None
) -> torch.Tensor:
    """a @ b with MX fake-quant of all three GEMMs (forward, dgrad, wgrad)."""
    return _QMatmul.apply(a, b, specs, generator)


def qlinear(
    x: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    specs: MatmulSpecs,
    generator: torch.Generator | None = None,
) -> torch.Tensor:
    """F.linear with MX fake-quant; tokens are all leading dims of x, flattened."""
    y = qmatmul(x.reshape(-1, x.shape[-1]), weight.t(), specs, generator)
    y = y.reshape(*x.shape[:-1], weight.shape[0])
    return y if bias is None else y + bias


class _FakeQuantSTE(torch.autograd.Function):
    """Forward Q(x); backward passes the gradient through, optionally rounded by ``grad_spec``."""

    @staticmethod
    def forward(ctx, x, spec: QuantSpec, grad_spec: QuantSpec | None, gen):
        ctx.grad_spec, ctx.gen = grad_spec, gen
        return quantize_spec(x, spec, generator=gen)

    @staticmethod
    def backward(ctx, g):
        if ctx.grad_spec is not None:
            g = quantize_spec(g, ctx.grad_spec, generator=ctx.gen)
        return g, None, None, None


def fake_quant_ste(
    x: torch.Tensor,
    spec: QuantSpec,
    grad_spec: QuantSpec | None = None,
    generator: torch.Generator | None = None,
) -> torch.Tensor:
    """Straight-through fake quantization (for parameters such as γ, and for vector-op rounding)."""
    if spec.is_identity and grad_spec is None:
        return x
    return _FakeQuantSTE.apply(x, spec, grad_spec, generator)


def round_vector(x: torch.Tensor, policy: QuantPolicy) -> torch.Tensor:
    """The bf16 vector-op emulation: round a value and, in backward, its gradient."""
    return fake_quant_ste(x, _BF16, _BF16) if policy.vector_ops == "bf16" else x


class MatMul(nn.Module):
    """A plain ``torch.matmul`` as a module, so ``quant.convert`` can find attention's QKᵀ and PV.

    Models use it instead of ``@`` where a matmul should be quantizable; unconverted it is exactly
    ``torch.matmul``.
    """

    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return torch.matmul(a, b)
