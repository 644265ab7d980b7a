"""Emulated MX numerics and the converter that puts them into training. See ``quant.mx``.

The format table (``quant.formats``), ``QuantSpec`` (``quant.spec``) and ``QuantPolicy``
(``quant.policy``) are torch-free; the arithmetic (``quant.mx``, ``quant.ops``, ``quant.convert``)
imports torch. Names load on first use (PEP 562), so ``from quant import QuantPolicy`` validates a
config without importing torch (2–3 s), while ``from quant import convert`` brings in everything.
"""

from __future__ import annotations

import importlib

_OWNERS = {
    "quant.convert": ("CONVERSIONS", "MXLinear", "convert", "policy_of", "set_policy"),
    "quant.formats": (
        "ELEM_FORMATS",
        "RECIPES",
        "SCALE_FORMATS",
        "ElemFormat",
        "Recipe",
        "Rounding",
        "ScaleFormat",
        "ScaleRule",
        "elem_format",
        "precision_names",
        "recipe",
        "scale_format",
    ),
    "quant.spec": ("QuantSpec",),
    "quant.mx": (
        "clip_fraction",
        "get_backend",
        "quantize",
        "quantize_spec",
        "set_backend",
        "spec_clip_fraction",
        "use_backend",
    ),
    "quant.ops": ("MatMul", "MatmulSpecs", "fake_quant_ste", "qlinear", "qmatmul"),
    "quant.policy": ("ROLES", "QuantPolicy"),
}
_MODULE = {name: module for module, names in _OWNERS.items() for name in names}

__all__ = sorted(_MODULE)


def __getattr__(name: str):
    module = _MODULE.get(name)
    if module is None:
        raise AttributeError(f"module 'quant' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
