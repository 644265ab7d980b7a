"""``convert`` turns an ordinary model into an MX-emulating one in place; ``set_policy`` changes it.

Conversion swaps the *class* of each eligible module for a quantizing subclass and attaches the
policy. Parameters, buffers, state_dict keys and optimizer state are untouched, so a policy can
change mid-run (``set_policy``) or be applied to a checkpointed model without any copying:

    nn.Linear                     -> MXLinear     (all three GEMMs quantized, see quant.ops)
    nn.LayerNorm, nn.RMSNorm      -> MXLayerNorm, MXRMSNorm (γ/β per ``norm_affine``; bf16 vector ops)
    nn.GELU, nn.ReLU, nn.SiLU,
    nn.Softmax                    -> bf16 rounding of input/output when ``vector_ops="bf16"``
    quant.MatMul                  -> MXMatMul     (attention matmuls, when ``attention=True``)

With a policy that quantizes nothing (``QuantPolicy()``, i.e. fp32), every converted module runs
the very code of its base class, so outputs and gradients are bit-identical to the unconverted model.
"""

from __future__ import annotations

import fnmatch
import functools

import torch
import torch.nn as nn
import torch.nn.functional as F

from quant.ops import MatMul, MatmulSpecs, fake_quant_ste, qlinear, qmatmul, round_vector
from quant.policy import QuantPolicy


class _Converted:
    """Mixin: the policy and the stochastic-rounding generator of a converted module."""

    mx_policy: QuantPolicy
    mx_generator: torch.Generator | None

    def _set_policy(self, policy: QuantPolicy, generator: torch.Generator | None) -> None:
        self.mx_policy = policy
        self.mx_generator = generator

    def extra_repr(self) -> str:  # print(model) shows what this module really quantizes
        base = super().extra_repr()  # type: ignore[misc]
        return ", ".join(x for x in (base, self.mx_describe()) if x)

    def mx_describe(self) -> str:
        """What the policy in force does to this module, in a few words ("not quantized" if nothing)."""
        p = self.mx_policy
        return f"w={p.name_of('w')}, a={p.name_of('a')}"


class MXLinear(_Converted, nn.Linear):
    def mx_describe(self) -> str:
        p = self.mx_policy
        if _linear_specs(p).is_identity:
            return "not quantized"
        roles = [f"{r}={p.name_of(r)}" for r in ("w", "a")]
        if not p.quantize_backward:
            roles.append("forward only")
        else:
            roles += [
                f"{r}={p.name_of(r)}" for r in ("w_bwd", "a_bwd", "g_dgrad", "g_wgrad") if getattr(p, r)
            ]
        return ", ".join(roles)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        p = self.mx_policy
        specs = _linear_specs(p)
        if specs.is_identity:
            return super().forward(x)
        return qlinear(x, self.weight, self.bias, specs, self.mx_generator)


def _affine(module, param: torch.Tensor | None) -> torch.Tensor | None:
    spec = module.mx_policy.norm_spec()
    if param is None or spec is None:
        return param
    return fake_quant_ste(param, spec, generator=module.mx_generator)


def _norm_describe(p) -> str:
    parts = []
    if p.norm_affine != "none":
        rule = f" ({p.norm_scale_rule} scales)" if p.norm_scale_rule else ""
        parts.append(f"affine={p.norm_affine}{rule}")
    if p.vector_ops != "none":
        parts.append(f"vector_ops={p.vector_ops}")
    return ", ".join(parts) or "not quantized"


class MXLayerNorm(_Converted, nn.LayerNorm):
    def mx_describe(self) -> str:
        return _norm_describe(self.mx_policy)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        p = self.mx_policy
        if p.norm_affine == "none" and p.vector_ops == "none":
            return super().forward(x)
        w, b = _affine(self, self.weight), _affine(self, self.bias)
        w, b = (None if t is None else round_vector(t, p) for t in (w, b))
        y = F.layer_norm(round_vector(x, p), self.normalized_shape, w, b, self.eps)
        return round_vector(y, p)


class MXRMSNorm(_Converted, nn.RMSNorm):
    def mx_describe(self) -> str:
        return _norm_describe(self.mx_policy)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        p = self.mx_policy
        if p.norm_affine == "none" and p.vector_ops == "none":
            return super().forward(x)
        w = _affine(self, self.weight)
        w = None if w is None else round_vector(w, p)
        y = F.rms_norm(round_vector(x, p), self.normalized_shape, w, self.eps)
        return round_vector(y, p)


class MXMatMul(_Converted, MatMul):
    def mx_describe(self) -> str:
        p = self.mx_policy
        return f"attention a={p.name_of('a')}" if p.attention else "not quantized"

    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        p = self.mx_policy
        if not p.attention:
            return super().forward(a, b)
        return qmatmul(a, b, _attention_specs(p), self.mx_generator)


class _MXVector(_Converted):
    """bf16 rounding around an element-wise op (GeLU, ReLU, SiLU, softmax) when vector_ops=bf16."""

    def mx_describe(self) -> str:
        return "bf16 rounding" if self.mx_policy.vector_ops != "none" else "not quantized"

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        p = self.mx_policy
        return round_vector(super().forward(round_vector(x, p)), p)  # type: ignore[misc]


class MXGELU(_MXVector, nn.GELU):
    pass


class MXReLU(_MXVector, nn.ReLU):
    pass


class MXSiLU(_MXVector, nn.SiLU):
    pass


class MXSoftmax(_MXVector, nn.Softmax):
    pass


# Exact type -> converted type. Subclasses of these are left alone: their forward may differ.
CONVERSIONS: dict[type[nn.Module], type[nn.Module]] = {
    nn.Linear: MXLinear,
    nn.LayerNorm: MXLayerNorm,
    nn.RMSNorm: MXRMSNorm,
    MatMul: MXMatMul,
    nn.GELU: MXGELU,
    nn.ReLU: MXReLU,
    nn.SiLU: MXSiLU,
    nn.Softmax: MXSoftmax,
}


@functools.lru_cache(maxsize=256)
def _linear_specs(p: QuantPolicy) -> MatmulSpecs:
    return MatmulSpecs.linear(p)


@functools.lru_cache(maxsize=256)
def _attention_specs(p: QuantPolicy) -> MatmulSpecs:
    return MatmulSpecs.attention(p)


def _excluded(name: str, policy: QuantPolicy) -> bool:
    return any(fnmatch.fnmatchcase(name, pat) for pat in policy.exclude)


def _generator(policy: QuantPolicy) -> torch.Generator:
    return torch.Generator().manual_seed(policy.seed)


def convert(model: nn.Module, policy: QuantPolicy) -> nn.Module:
    """Make ``model`` emulate ``policy`` in place (and return it). Idempotent: re-converting a
    converted model just sets the new policy. Modules matching ``policy.exclude`` stay as they are."""
    gen = _generator(policy)
    for name, module in model.named_modules():
        if isinstance(module, _Converted):
            module._set_policy(policy, gen)
            continue
        target = CONVERSIONS.get(type(module))
        if target is None or _excluded(name, policy):
            continue
        module.__class__ = target
        module._set_policy(policy, gen)
    return model


def set_policy(model: nn.Module, policy: QuantPolicy) -> nn.Module:
    """Change the precision of a converted model mid-training (parameters and optimizer state are
    untouched). ``exclude`` was decided at conversion and cannot change here."""
    converted = [m for m in model.modules() if isinstance(m, _Converted)]
    if not converted:
        raise ValueError("set_policy needs a model converted with quant.convert first")
    if policy.exclude != converted[0].mx_policy.exclude:
        raise ValueError("precision.exclude cannot change mid-run; convert a fresh model instead")
    gen = _generator(policy)
    for m in converted:
        m._set_policy(policy, gen)
    return model


def policy_of(model: nn.Module) -> QuantPolicy | None:
    """The policy a converted model currently runs (None if it was never converted)."""
    for m in model.modules():
        if isinstance(m, _Converted):
            return m.mx_policy
    return None
