"""Emulated MX numerics and the converter that puts them into training. See ``quant.mx``."""

from quant.convert import CONVERSIONS, MXLinear, convert, policy_of, set_policy
from quant.formats import (
    ELEM_FORMATS,
    RECIPES,
    SCALE_FORMATS,
    ElemFormat,
    Recipe,
    Rounding,
    ScaleFormat,
    ScaleRule,
    elem_format,
    precision_names,
    recipe,
    scale_format,
)
from quant.mx import (
    QuantSpec,
    clip_fraction,
    get_backend,
    quantize,
    quantize_spec,
    set_backend,
    spec_clip_fraction,
    use_backend,
)
from quant.ops import MatMul, MatmulSpecs, fake_quant_ste, qlinear, qmatmul
from quant.policy import ROLES, QuantPolicy

__all__ = [
    "CONVERSIONS",
    "MXLinear",
    "MatMul",
    "MatmulSpecs",
    "QuantPolicy",
    "ROLES",
    "convert",
    "fake_quant_ste",
    "policy_of",
    "qlinear",
    "qmatmul",
    "set_policy",
    "ELEM_FORMATS",
    "RECIPES",
    "SCALE_FORMATS",
    "ElemFormat",
    "QuantSpec",
    "Recipe",
    "Rounding",
    "ScaleFormat",
    "ScaleRule",
    "clip_fraction",
    "spec_clip_fraction",
    "elem_format",
    "get_backend",
    "precision_names",
    "quantize",
    "quantize_spec",
    "recipe",
    "scale_format",
    "set_backend",
    "use_backend",
]
