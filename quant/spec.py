"""``QuantSpec``: everything that decides how one tensor is quantized — its element format, block
size, scale format and rule, rounding, and whether a per-tensor scale sits above the block scales.

A spec is a value (frozen, hashable: the compiled backend keys one graph on each) built from the
format table (``quant.formats``) by name: ``QuantSpec.make("fp8_e4m3")``, or a recipe name
(``nvfp4``, ``mxfp8_e4m3`` …) that brings its own block size and scale. Its checks run when it is
made, so a bad combination fails while a config is validated, not mid-training. It lives apart from
the arithmetic (``quant.mx``) so that configs, policies and sweep planning never import torch.
"""

from __future__ import annotations

from dataclasses import dataclass

from quant.formats import (
    ELEM_FORMATS,
    RECIPES,
    ElemFormat,
    ElemKind,
    Rounding,
    ScaleFormat,
    ScaleKind,
    ScaleRule,
    elem_format,
    precision_names,
    recipe,
    scale_format,
)


@dataclass(frozen=True)
class QuantSpec:
    """Everything that decides how one tensor is quantized (hashable: one compiled graph each)."""

    elem: ElemFormat
    block_size: int | None = 32
    scale: ScaleFormat = scale_format("e8m0")
    scale_rule: ScaleRule = ScaleRule.FLOOR
    rounding: Rounding = Rounding.EVEN
    global_scale: bool = False

    def __post_init__(self):
        if self.elem.kind is ElemKind.BLOCK:
            if self.block_size is None or self.block_size < 1:
                raise ValueError(
                    f"block_size must be a positive integer for {self.elem.name}, got {self.block_size}"
                )
            if self.global_scale and self.scale.kind is not ScaleKind.FLOAT:
                raise ValueError(
                    f"global_scale needs a float scale format (ue4m3, ue5m3), not "
                    f"{self.scale.name!r}: set global_scale=false or scale=ue4m3"
                )
        else:
            # bf16/fp16/fp32 are rounded value by value: block and scale do not apply.
            object.__setattr__(self, "block_size", None)
            object.__setattr__(self, "global_scale", False)

    @property
    def is_identity(self) -> bool:
        return self.elem.kind is ElemKind.IDENTITY

    @classmethod
    def make(
        cls,
        fmt: str | ElemFormat,
        *,
        block_size: int | None = 32,
        scale: str | ScaleFormat = "e8m0",
        scale_rule: str | ScaleRule = "floor",
        rounding: str | Rounding = "even",
        global_scale: bool = False,
    ) -> QuantSpec:
        """Build a spec from names; a recipe name (``nvfp4``, ``mxfp8_e4m3`` …) brings its own
        element format, block size and scale and overrides those arguments."""
        if isinstance(fmt, str) and fmt not in ELEM_FORMATS:
            if fmt not in RECIPES:
                raise ValueError(f"unknown format {fmt!r}; choose one of: {', '.join(precision_names())}")
            r = recipe(fmt)
            fmt, block_size, scale = r.elem, r.block_size, r.scale
            scale_rule, global_scale = r.scale_rule, r.global_scale
        return cls(
            elem_format(fmt),
            block_size,
            scale_format(scale),
            ScaleRule(scale_rule),
            Rounding(rounding),
            global_scale,
        )
