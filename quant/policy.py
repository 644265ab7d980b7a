"""The precision policy: which format each tensor role of a training step is quantized to.

A Linear layer runs three GEMMs per step, and each quantizes its two operands along *that GEMM's*
reduction axis (this is what MX hardware must do; quantizing once and reusing is not MX):

    forward   y      = Q_a(x)        · Q_w(W)ᵀ        blocks along in_features
    dgrad     grad_x = Q_g_dgrad(dy) · Q_w_bwd(W)     blocks along out_features
    wgrad     grad_W = Q_g_wgrad(dy)ᵀ · Q_a_bwd(x)    blocks along the token axis

Roles and defaults: ``w`` (forward weights) and ``a`` (forward activations) are set by the user;
``w_bwd`` defaults to ``w``, ``a_bwd`` (the saved activations) to ``a``, ``g_dgrad`` (the incoming
gradient in dgrad) to ``a`` and ``g_wgrad`` to ``g_dgrad`` — microxcaling's inheritance, with role
names that say what they are. Every operand is quantized from the high-precision tensor (never
re-quantized from an already quantized copy, as Transformer Engine does). ``quantize_backward=False``
is forward-only MX: both backward GEMMs run in high precision.

Each role takes an element-format name (``fp8_e4m3`` … with the policy's ``block_size``, ``scale``,
``scale_rule``) or a recipe name (``mxfp8_e4m3``, ``nvfp4``, ``bf16`` …, which bring their own).
"""

from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass

from quant.formats import (
    ELEM_FORMATS,
    RECIPES,
    SCALE_FORMATS,
    ElemKind,
    Rounding,
    ScaleKind,
    ScaleRule,
    precision_names,
)
from quant.spec import QuantSpec
from records.precision import DEFAULTS, INHERITS

ROLES = ("w", "a", "w_bwd", "a_bwd", "g_dgrad", "g_wgrad")
_BACKWARD_ROLES = ("w_bwd", "a_bwd", "g_dgrad", "g_wgrad")
_IDENTITY = QuantSpec.make("fp32")


def _check_name(field: str, value: str, extra: tuple[str, ...] = ()) -> None:
    names = precision_names()
    if value not in names and value not in extra:
        valid = ", ".join((*extra, *names))
        raise ValueError(f"precision.{field}={value!r} is not a known format; use one of: {valid}")


@dataclass(frozen=True)
class QuantPolicy:
    """A typed, frozen precision policy (see the module docstring for the roles)."""

    w: str = DEFAULTS["w"]
    a: str = DEFAULTS["a"]
    w_bwd: str | None = DEFAULTS["w_bwd"]
    a_bwd: str | None = DEFAULTS["a_bwd"]
    g_dgrad: str | None = DEFAULTS["g_dgrad"]
    g_wgrad: str | None = DEFAULTS["g_wgrad"]
    block_size: int = DEFAULTS["block_size"]
    scale: str = DEFAULTS["scale"]
    scale_rule: str = DEFAULTS["scale_rule"]
    global_scale: bool = DEFAULTS["global_scale"]
    """A per-tensor fp32 scale above the block scales (NVFP4's second level: the tensor's amax maps to
    the top of scale × element range, so a float scale format cannot underflow whatever the tensor's
    magnitude). Needs a float scale (``ue4m3``, ``ue5m3``); recipes bring their own."""
    rounding: str = DEFAULTS["rounding"]
    grad_rounding: str | None = DEFAULTS["grad_rounding"]
    """Rounding of the two gradient roles (default: ``rounding``); ``stochastic`` is common here."""
    grad_scale_rule: str | None = DEFAULTS["grad_scale_rule"]
    """Scale rule of the two gradient roles' blocks (default: ``scale_rule``). With ``ceil`` under a
    ``floor`` forward no gradient block clamps its max while weights and activations still do: where
    in the step the floor rule's clamp acts."""
    quantize_backward: bool = DEFAULTS["quantize_backward"]
    norm_affine: str = DEFAULTS["norm_affine"]
    """LayerNorm/RMSNorm γ and β: ``none`` (high precision), ``bf16`` (what the instability study's
    released emulator did) or a format/recipe (MX blocks of γ: the paper's clamping mechanism)."""
    norm_scale_rule: str | None = DEFAULTS["norm_scale_rule"]
    """Scale rule of the norm affine's blocks (default: ``scale_rule``). ``ceil`` never saturates: a
    block of γ in (0.875, 1) gets X = 2**-8 instead of 2**-9, so nothing is clamped to 0.875 (the
    γ-only intervention of the instability study, with every other tensor unchanged)."""
    vector_ops: str = DEFAULTS["vector_ops"]
    """``bf16`` rounds inputs, outputs and gradients of norms, activations and softmax to bf16."""
    attention: bool = DEFAULTS["attention"]
    """MX on the attention matmuls (QKᵀ, PV): operands use ``a``/``a_bwd``, gradients ``g_*``."""
    exclude: tuple[str, ...] = DEFAULTS["exclude"]
    """fnmatch patterns of module names that ``quant.convert`` leaves alone, e.g. ("embed*",)."""
    seed: int = DEFAULTS["seed"]
    """Seed of the generator behind stochastic rounding."""

    def __post_init__(self):
        for role in ROLES:
            value = getattr(self, role)
            if value is not None:
                _check_name(role, value)
        if self.block_size < 1:
            raise ValueError(f"precision.block_size must be >= 1, got {self.block_size}")
        if self.scale not in SCALE_FORMATS:
            raise ValueError(
                f"precision.scale={self.scale!r} is unknown; use one of: {', '.join(SCALE_FORMATS)}"
            )
        named = [getattr(self, role) for role in ROLES]
        blocks = any(v in ELEM_FORMATS and ELEM_FORMATS[v].kind is ElemKind.BLOCK for v in named)
        if self.global_scale and blocks and SCALE_FORMATS[self.scale].kind is not ScaleKind.FLOAT:
            raise ValueError(
                f"precision.global_scale=true needs a float block scale, not precision.scale={self.scale}: "
                "set precision.scale=ue4m3 (NVFP4's) or ue5m3"
            )
        enums = (
            ("scale_rule", ScaleRule),
            ("norm_scale_rule", ScaleRule),
            ("grad_scale_rule", ScaleRule),
            ("rounding", Rounding),
        )
        for field, enum in enums:
            if getattr(self, field) is None:
                continue
            try:
                enum(getattr(self, field))
            except ValueError:
                valid = ", ".join(m.value for m in enum)
                raise ValueError(
                    f"precision.{field}={getattr(self, field)!r} is unknown; use one of: {valid}"
                ) from None
        if self.grad_rounding is not None and self.grad_rounding not in {r.value for r in Rounding}:
            raise ValueError(f"precision.grad_rounding={self.grad_rounding!r} is unknown")
        _check_name("norm_affine", self.norm_affine, ("none",))
        if self.vector_ops not in ("none", "bf16"):
            raise ValueError(f"precision.vector_ops={self.vector_ops!r}; use 'none' or 'bf16'")
        object.__setattr__(self, "exclude", tuple(self.exclude))
        self._check_recipes()
        # Fail now, not mid-training, on combinations QuantSpec rejects (e.g. global scale + e8m0).
        for role in ROLES:
            self.spec(role)
        self.norm_spec()

    def _check_recipes(self) -> None:
        """A recipe (``nvfp4``, ``mxfp8_e4m3`` …) fixes its own block size, scale and scale rule; a
        policy that also sets one of them to something else is ambiguous (it used to train the
        recipe's and record the other), so it is refused, unless some role names a block element
        format, which the setting is then for (``w=mxfp8_e4m3 a=fp8_e4m3 block_size=16``)."""
        values = [getattr(self, role) for role in ROLES]
        if any(v in ELEM_FORMATS and ELEM_FORMATS[v].kind is ElemKind.BLOCK for v in values):
            return
        defaults = {f.name: f.default for f in dataclasses.fields(type(self))}
        for role in ROLES:
            name = getattr(self, role)
            if name not in RECIPES:
                continue
            r = RECIPES[name]
            own = {
                "block_size": r.block_size,
                "scale": r.scale,
                "scale_rule": r.scale_rule.value,
                "grad_scale_rule": r.scale_rule.value,
                "global_scale": r.global_scale,
            }
            for key, value in own.items():
                mine = getattr(self, key)
                if value is not None and mine != defaults[key] and mine != value:
                    raise ValueError(
                        f"precision.{key}={mine} conflicts with precision.{role}={name}, a recipe with "
                        f"{key} {value}: drop precision.{key}, or name the element format "
                        f"({r.elem}) to set your own"
                    )

    @classmethod
    def uniform(cls, name: str, **kw) -> QuantPolicy:
        """Weights and activations (and so every backward role) in one format or recipe."""
        return cls(w=name, a=name, **kw)

    def replace(self, **changes) -> QuantPolicy:
        return dataclasses.replace(self, **changes)

    def name_of(self, role: str) -> str:
        """The configured format name of ``role``, with the backward defaults resolved."""
        value = getattr(self, role)
        return value if value is not None else self.name_of(INHERITS[role])

    def spec(self, role: str) -> QuantSpec:
        """The QuantSpec applied to tensor ``role`` (identity for backward roles when forward-only)."""
        return _spec(self, role)

    @property
    def is_identity(self) -> bool:
        """True when no tensor is touched: converted modules then run the unconverted code."""
        return (
            all(self.spec(r).is_identity for r in ROLES)
            and self.norm_affine == "none"
            and self.vector_ops == "none"
        )

    def norm_spec(self) -> QuantSpec | None:
        """How γ/β are quantized, or None."""
        if self.norm_affine == "none":
            return None
        return self._make(self.norm_affine, self.rounding, self.norm_scale_rule)

    def _make(self, name: str, rounding: str, scale_rule: str | None = None) -> QuantSpec:
        return QuantSpec.make(
            name,
            block_size=self.block_size,
            scale=self.scale,
            scale_rule=scale_rule or self.scale_rule,
            rounding=rounding,
            global_scale=self.global_scale,
        )


@functools.lru_cache(maxsize=1024)
def _spec(policy: QuantPolicy, role: str) -> QuantSpec:
    if role not in ROLES:
        raise ValueError(f"unknown tensor role {role!r}; roles are {ROLES}")
    if role in _BACKWARD_ROLES and not policy.quantize_backward:
        return _IDENTITY
    grad = role.startswith("g_")
    rounding = (policy.grad_rounding or policy.rounding) if grad else policy.rounding
    return policy._make(policy.name_of(role), rounding, policy.grad_scale_rule if grad else None)
