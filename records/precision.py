"""The precision settings of a run record: their defaults and the one label that names them.

A run's precision is the policy of ``quant.QuantPolicy`` (``quant/policy.py`` teaches the roles): the
forward formats ``w`` and ``a``, four backward roles that inherit from them when unset, the block
geometry and scale, rounding, forward-only, the LayerNorm affine and vector ops. ``DEFAULTS`` below
is the one table of their defaults: ``QuantPolicy`` takes its field defaults from it, and readers of
records that store only the non-default settings (older summaries) fill the rest from it. It lives
here, torch-free, so that ``analysis`` reads records without importing the training code.

Backward inheritance (microxcaling's, with role names that say what they are)::

    w_bwd   ← w          the weights in dgrad
    a_bwd   ← a          the saved activations in wgrad
    g_dgrad ← a          the incoming gradient in dgrad
    g_wgrad ← g_dgrad    the incoming gradient in wgrad

``label`` is the one name of a precision, used for the run directory, ``--status``, the report's
``precision`` column and the wandb tag. A sweep may name a precision (``sweep.precisions[].name``);
that name is then the label, recorded as ``logger.label`` in the run's config so that every reader
shows the same string. Otherwise the label is built from the settings, path-safe, with only what
differs from the defaults:

    mxfp8_e4m3                 w = a = fp8_e4m3 (or the recipe mxfp8_e4m3): blocks of 32, E8M0
    mxfp8_e4m3w-bf16a          MX weights, bf16 activations (a hybrid of the instability study)
    mxfp8_e4m3-fwd             forward-only MX (both backward GEMMs in high precision)
    mxfp8_e4m3-ln_mxfp8_e4m3   LayerNorm γ/β quantized too
    fp4_e2m1-bs16-ue5m3        a non-MX scale drops the ``mx`` prefix; the geometry is spelled out
    fp4_e2m1-bs8-ue4m3-global  … under a per-tensor fp32 scale (NVFP4's two levels, blocks of 8)

An element format with E8M0 scales is an MX format, so ``fp8_e4m3`` and the recipe ``mxfp8_e4m3``
(the same numerics) get the same label. The label is not the run's identity (``records.identity``
is): two runs with the same label may differ in settings the label leaves out (``exclude``
patterns, a stochastic-rounding seed).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

DEFAULTS: dict[str, Any] = {
    "w": "fp32",
    "a": "fp32",
    "w_bwd": None,
    "a_bwd": None,
    "g_dgrad": None,
    "g_wgrad": None,
    "block_size": 32,
    "scale": "e8m0",
    "scale_rule": "floor",
    "global_scale": False,
    "rounding": "even",
    "grad_rounding": None,
    "grad_scale_rule": None,
    "quantize_backward": True,
    "norm_affine": "none",
    "norm_scale_rule": None,
    "vector_ops": "none",
    "attention": False,
    "exclude": (),
    "seed": 0,
}
"""Every field of ``quant.QuantPolicy`` and its default."""

BACKWARD_ROLES = ("w_bwd", "a_bwd", "g_dgrad", "g_wgrad")
INHERITS = {"w_bwd": "w", "a_bwd": "a", "g_dgrad": "a", "g_wgrad": "g_dgrad"}
"""The role each backward role takes its format from when it is unset (resolved in this order)."""

ALIASES = {"mxfp8": "mxfp8_e4m3", "mxfp4": "mxfp4_e2m1"}
"""Short recipe names: ``quant.formats`` registers each as a second name of its target recipe."""

_MX_ELEMENTS = ("fp8_", "fp6_", "fp4_", "int8")
_TAGS = (  # setting → how a non-default value shows in the label
    ("block_size", lambda v: f"bs{v}"),
    ("scale", str),
    ("scale_rule", str),
    ("global_scale", lambda v: "global"),
    ("rounding", lambda v: f"round_{v}"),
    ("grad_rounding", lambda v: f"grad_round_{v}"),
    ("grad_scale_rule", lambda v: f"grad_{v}"),
    ("norm_affine", None),  # formatted as a format name: ln_<format>
    ("norm_scale_rule", lambda v: f"ln_{v}"),
    ("vector_ops", lambda v: f"vec_{v}"),
)


def settings(precision: Mapping[str, Any] | None) -> dict[str, Any]:
    """``precision`` with every unset field at its default (unknown keys are kept as they are)."""
    return {**DEFAULTS, **(precision or {})}


def resolve(precision: Mapping[str, Any] | None) -> dict[str, Any]:
    """The settings with the backward roles resolved to the formats that actually run: inherited
    when unset, and high precision (``fp32``) for every backward role of a forward-only run."""
    p = settings(precision)
    for role in BACKWARD_ROLES:
        if p[role] is None:
            p[role] = p[INHERITS[role]]
    if not p["quantize_backward"]:
        p.update(dict.fromkeys(BACKWARD_ROLES, "fp32"))
    return p


def format_name(fmt: Any, scale: Any = DEFAULTS["scale"]) -> str:
    """The label's name of one format: an element format with E8M0 block scales is an MX format
    (``fp8_e4m3`` → ``mxfp8_e4m3``); recipes (``mxfp4_e2m1``, ``nvfp4``, ``bf16`` …) keep theirs."""
    s = ALIASES.get(str(fmt), str(fmt))
    return f"mx{s}" if scale == "e8m0" and s.startswith(_MX_ELEMENTS) else s


def label(precision: Mapping[str, Any] | None, name: str | None = None) -> str:
    """The one label of a precision: ``name`` when the sweep gave one, else built from the settings
    (see the module docstring)."""
    if name:
        return str(name)
    p = settings(precision)
    scale = p["scale"]
    w, a = format_name(p["w"], scale), format_name(p["a"], scale)
    parts = [w if w == a else f"{w}w-{a}a"]
    if not p["quantize_backward"]:
        parts.append("fwd")
    else:  # a backward role shows only where it differs from what it would inherit
        for role in BACKWARD_ROLES:
            if p[role] is not None and p[role] != resolve({**p, role: None})[role]:
                parts.append(f"{role}_{format_name(p[role], scale)}")
    for key, fmt in _TAGS:
        value = p[key]
        if value is None or value == DEFAULTS[key]:
            continue
        parts.append(f"ln_{format_name(value, scale)}" if fmt is None else fmt(value))
    if p["attention"]:
        parts.append("attn")
    if p["exclude"]:
        parts.append(f"excl{len(p['exclude'])}")
    return "-".join(parts)


def block_name(elem: str, block_size: int = 32, scale: str = "e8m0", global_scale: bool = False) -> str:
    """The name of one block quantization of ``elem``: the element format itself for MX blocks (32,
    E8M0), else the label's spelling of the geometry (``fp4_e2m1-bs8-ue4m3-global``). Keys of
    ``train.tensor_error``'s rows, and how ``analysis`` finds a trained precision among them."""
    geometry = {"block_size": int(block_size), "scale": str(scale), "global_scale": bool(global_scale)}
    if geometry == {"block_size": 32, "scale": "e8m0", "global_scale": False}:
        return str(elem)
    return label({"w": elem, "a": elem, **geometry})


def pair(precision: Mapping[str, Any] | None) -> str:
    """``<w>/<a>``: the forward weight and activation formats as configured (for W × A maps)."""
    p = settings(precision)
    return f"{p['w']}/{p['a']}"


__all__ = [
    "ALIASES",
    "BACKWARD_ROLES",
    "DEFAULTS",
    "INHERITS",
    "block_name",
    "format_name",
    "label",
    "pair",
    "resolve",
    "settings",
]
