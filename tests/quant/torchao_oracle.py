"""Thin adapter over torchao 0.18.0, the bit-exactness oracle of ``test_torchao_oracle.py``.

torchao's MX/NVFP4 code lives under ``torchao.prototype`` and its import paths move between
releases, so every torchao import of the test suite is kept here. The test module guards with
``pytest.importorskip("torchao")`` before importing this file; this file imports torchao directly.

What torchao computes (0.18.0, read in the wheel; see /work/shared/notes/peers-mx.md §3.3, §3.4):

* ``to_mx(x, elem_dtype, block, ScaleCalculationMode.FLOOR)``: the OCP MX v1.0 FLOOR scale read
  from amax's exponent bits, stored as an E8M0 byte; elements RNE onto the element grid with
  saturation. ``to_dtype`` multiplies the element values by 2**(byte - 127) in the target dtype.
  Known deviation: the data are divided by ``max(2**(byte-127), 2**-126)`` while the stored byte
  is not clamped, so blocks whose scale exponent is -127 come back at about half their value.
* ``nvfp4_quantize(x, 16, per_tensor_scale)``: block scale amax/6 (divided by the per-tensor scale
  amax_t/(448*6) in the two-level form), clamped to [2**-6, 448] and cast to E4M3 (RNE); elements
  are ``x * (1/s)`` (single level) or ``x * ((1/g)/s)`` (two level), clamped to ±6 and RNE to
  E2M1. Dequantized: ``fp4 * (g * s)`` in fp32. Known deviation: block scales below 2**-6, the
  smallest E4M3 normal, are clamped up to 2**-6 instead of being rounded onto E4M3 subnormals.
"""

from __future__ import annotations

import torch
import torchao
from torchao.prototype.mx_formats import constants as _constants
from torchao.prototype.mx_formats.config import ScaleCalculationMode
from torchao.prototype.mx_formats.kernels import (
    f4_unpacked_to_f32,
    f6_e2m3_unpacked_to_f32,
    f6_e3m2_unpacked_to_f32,
    unpack_uint4,
)
from torchao.prototype.mx_formats.mx_tensor import to_dtype, to_mx
from torchao.prototype.mx_formats.nvfp4_tensor import NVFP4Tensor, per_tensor_amax_to_scale

TORCHAO_VERSION: str = torchao.__version__

NVFP4_BLOCK = 16

# Our element-format names -> torchao's ``elem_dtype`` (a torch dtype, or a string for fp6).
ELEM_DTYPES: dict[str, torch.dtype | str] = {
    "fp8_e4m3": torch.float8_e4m3fn,
    "fp8_e5m2": torch.float8_e5m2,
    "fp6_e3m2": _constants.DTYPE_FP6_E3M2,
    "fp6_e2m3": _constants.DTYPE_FP6_E2M3,
    "fp4_e2m1": torch.float4_e2m1fn_x2,
}

_MODES = {
    "floor": ScaleCalculationMode.FLOOR,
    "ceil": ScaleCalculationMode.CEIL,
    "even": ScaleCalculationMode.EVEN,
    "rceil": ScaleCalculationMode.RCEIL,
}


def _elem_dtype(fmt: str) -> torch.dtype | str:
    try:
        return ELEM_DTYPES[fmt]
    except KeyError:
        raise ValueError(f"torchao has no MX element format {fmt!r}") from None


def _element_values(data_lp: torch.Tensor, fmt: str) -> torch.Tensor:
    """torchao's stored element codes, decoded to fp32 values (unscaled)."""
    elem = _elem_dtype(fmt)
    if elem in (torch.float8_e4m3fn, torch.float8_e5m2):
        return data_lp.to(torch.float32)
    if elem == _constants.DTYPE_FP6_E2M3:
        return f6_e2m3_unpacked_to_f32(data_lp)
    if elem == _constants.DTYPE_FP6_E3M2:
        return f6_e3m2_unpacked_to_f32(data_lp)
    return f4_unpacked_to_f32(unpack_uint4(data_lp.view(torch.uint8)))


def mx_parts(x: torch.Tensor, fmt: str, block: int, mode: str = "floor") -> tuple[torch.Tensor, torch.Tensor]:
    """torchao's MX encoding of ``x`` (blocks along the last dim, which ``block`` must divide).

    Returns ``(scale_bytes, elements)``: the biased E8M0 exponents as uint8, shape
    ``(*x.shape[:-1], x.shape[-1] // block)``, and the element values as fp32, shape ``x.shape``.
    """
    scale, data_lp = to_mx(x.contiguous(), _elem_dtype(fmt), block, _MODES[mode])
    values = _element_values(data_lp, fmt).reshape(x.shape)
    return scale.view(torch.uint8), values


def mx_dequant(x: torch.Tensor, fmt: str, block: int, mode: str = "floor") -> torch.Tensor:
    """torchao's ``to_dtype(*to_mx(x, ...))``: the dequantized tensor, in x's dtype."""
    elem = _elem_dtype(fmt)
    scale, data_lp = to_mx(x.contiguous(), elem, block, _MODES[mode])
    return to_dtype(data_lp, scale, elem, block, x.dtype).reshape(x.shape)


def mx_floor(x: torch.Tensor, fmt: str, block: int) -> torch.Tensor:
    """OCP MX FLOOR quantize-dequantize of ``x`` by torchao, in x's dtype."""
    return mx_dequant(x, fmt, block, "floor")


def nvfp4(x: torch.Tensor, per_tensor: bool) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """torchao NVFP4 (blocks of 16 along the last dim) of a 2-D or 3-D tensor.

    ``per_tensor=True`` is the two-level form with ``per_tensor_scale = amax(|x|) / (448 * 6)``;
    ``False`` is single-level (E4M3 block scales only).

    Returns ``(dequantized, scale_bytes, fp4_values)``: the dequantized tensor in x's dtype, the
    E4M3 block scales as raw uint8 bytes, shape ``(*x.shape[:-1], x.shape[-1] // 16)``, and the
    E2M1 element values as fp32, shape ``x.shape``.
    """
    pts = per_tensor_amax_to_scale(x.abs().amax()) if per_tensor else None
    t = NVFP4Tensor.to_nvfp4(x.contiguous(), NVFP4_BLOCK, per_tensor_scale=pts)
    deq = t.dequantize(x.dtype)
    scale_bytes = t.scale.contiguous().view(torch.uint8).reshape(*x.shape[:-1], x.shape[-1] // NVFP4_BLOCK)
    values = f4_unpacked_to_f32(unpack_uint4(t.qdata.contiguous().view(torch.uint8)))
    return deq, scale_bytes, values.reshape(x.shape)
