"""The CPU fast path of ``quant.mx``: ``mx_cpu.c`` built on first use and called through ctypes.

Why C: on CPU, fake quantization is bound by arithmetic. The C loop in ``mx_cpu.c`` computes each
block's scale once and lets the compiler vectorize the element loop, so fp32 runs at about memcpy
speed and bf16 at 1.4-2.3x a clone with AVX-512 (4096², 2 cores), and at 1.6x (fp32) and 2.7x (bf16)
a clone with AVX2 only; torch.compile's fused kernel takes 2-3x longer (``benchmarks/quant_bench.py``).
It is bit-identical to the eager reference (tested).

What it covers: CPU tensors in fp32 or bf16 with round-to-nearest-even: block formats (any block
size, every scale format and rule, the two-level global scale) and the element-wise bf16/fp16
roundings. Everything else (fp16 tensors, CUDA, ``away`` and ``stochastic`` rounding) stays on the
torch paths.

Build: ``cc -O3 -march=native -ffp-contract=off -fopenmp`` (never -ffast-math: the numerics depend
on IEEE fp32 arithmetic without contraction) into ``$MXSWEEP_CACHE_DIR`` (default
``~/.cache/mxsweep``), named by a hash of the source, the flags and this CPU's feature flags, so a
cluster whose nodes share a home directory never loads a library built for another CPU. The build
takes about a second, is atomic (concurrent jobs race harmlessly), and when it fails (no compiler)
``available()`` is False and quant.mx falls back to torch.compile or eager.
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import math
import os
import platform
import shutil
import subprocess
import warnings
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import torch

from quant.formats import Rounding, ScaleKind, ScaleRule, elem_format
from records import atomic_write

SOURCE = Path(__file__).with_name("mx_cpu.c")
FLAGS = ("-O3", "-march=native", "-ffp-contract=off", "-fno-math-errno", "-fopenmp", "-shared", "-fPIC")
_SUFFIX = {torch.float32: "f32", torch.bfloat16: "bf16"}
_SCALE_KIND = {ScaleKind.POW2: 0, ScaleKind.FLOAT: 1, ScaleKind.EXACT: 2}
PARALLEL_MIN_NUMEL = 1 << 15  # below this one thread is faster than waking the OpenMP team


class _Params(ctypes.Structure):
    """``mx_params`` of mx_cpu.c, field for field."""

    _fields_ = [
        ("scale_kind", ctypes.c_int32),
        ("ceil_rule", ctypes.c_int32),
        ("exp_lo", ctypes.c_int32),
        ("exp_hi", ctypes.c_int32),
        ("elem_emax", ctypes.c_int32),
        ("elem_max", ctypes.c_float),
        ("elem_mant", ctypes.c_float),
        ("e_emin", ctypes.c_int32),
        ("e_mbits", ctypes.c_int32),
        ("s_emin", ctypes.c_int32),
        ("s_mbits", ctypes.c_int32),
        ("s_max", ctypes.c_float),
        ("g", ctypes.c_float),
    ]


def _cpu_flags() -> str:
    try:
        return next(line for line in open("/proc/cpuinfo") if line.startswith("flags"))
    except (OSError, StopIteration):
        return platform.processor() or platform.machine()


def _build(cc: str, flags: tuple[str, ...]) -> Path:
    """Compile mx_cpu.c (once per source, flags and CPU) and return the shared library's path."""
    key = hashlib.sha256("\0".join([SOURCE.read_text(), cc, *flags, _cpu_flags()]).encode()).hexdigest()
    cache = Path(os.environ.get("MXSWEEP_CACHE_DIR", Path.home() / ".cache" / "mxsweep"))
    lib = cache / f"mx_cpu-{key[:16]}.so"
    if lib.exists():
        return lib
    cache.mkdir(parents=True, exist_ok=True)
    # atomic (records.atomic_write): another process may be building the same file
    return atomic_write(
        lib,
        lambda tmp: subprocess.run(
            [cc, *flags, str(SOURCE), "-o", str(tmp)], check=True, capture_output=True, text=True
        ),
    )


class _Kernels(NamedTuple):
    """The kernel's three entry points for one element type (mx_cpu.c's KERNELS)."""

    quantize: Any  # (x, out, ntiles, block, post, maxima* or NULL, params*, threads)
    round: Any  # (x, out, n, bf16, params*, threads)
    block_maxima: Any  # (x, maxima*, ntiles, block, post, threads) -> uint32


_P, _I32, _I64 = ctypes.c_void_p, ctypes.c_int32, ctypes.c_int64
_PARAMS = ctypes.POINTER(_Params)


@functools.cache
def _kernels() -> dict[torch.dtype, _Kernels] | None:
    """Build (or find) and load the library once; its entry points by tensor dtype."""
    if os.environ.get("MXSWEEP_NATIVE", "1") == "0":
        return None
    return _load(FLAGS)


def _load(flags: tuple[str, ...]) -> dict[torch.dtype, _Kernels] | None:
    """The library built with ``flags`` (tests also load a build without AVX-512 this way)."""
    cc = shutil.which(os.environ.get("CC", "cc")) or shutil.which("gcc")
    if cc is None:
        return None
    try:
        lib = ctypes.CDLL(str(_build(cc, flags)))
    except (OSError, subprocess.CalledProcessError) as e:
        detail = getattr(e, "stderr", "") or str(e)
        warnings.warn(
            f"quant: building the CPU kernel failed; torch paths instead: {detail[-500:]}", stacklevel=2
        )
        return None

    def entry(name: str, restype, *argtypes):
        fn = getattr(lib, name)
        fn.restype, fn.argtypes = restype, list(argtypes)
        return fn

    return {
        dtype: _Kernels(
            quantize=entry(f"mx_quantize_{suffix}", None, _P, _P, _I64, _I64, _I64, _P, _PARAMS, _I32),
            round=entry(f"mx_round_{suffix}", None, _P, _P, _I64, _I32, _PARAMS, _I32),
            block_maxima=entry(f"mx_block_maxima_{suffix}", ctypes.c_uint32, _P, _P, _I64, _I64, _I64, _I32),
        )
        for dtype, suffix in _SUFFIX.items()
    }


def available() -> bool:
    """True when the kernel is built (or can be) on this machine; ``MXSWEEP_NATIVE=0`` disables it."""
    return _kernels() is not None


_BF16_GRID = elem_format("bf16").grid  # the element-wise grid the kernel rounds by bit pattern


def supports(x: torch.Tensor, spec) -> bool:
    """Whether the kernel computes ``quant.mx``'s result for this input: ``_fake_quant_blocks(x, spec,
    None)`` for a block spec (x of shape (pre, nblocks, block, post)), ``_fake_quant_elementwise``
    otherwise."""
    grid = spec.elem.grid
    return (
        x.device.type == "cpu"
        and x.dtype in _SUFFIX
        and spec.rounding is Rounding.EVEN
        and (spec.block_size is not None or grid.normal_steps or grid == _BF16_GRID)
        and not (x.requires_grad and torch.is_grad_enabled())  # no autograd graph through C
        and available()
    )


@functools.lru_cache(maxsize=256)
def _params(spec) -> _Params:
    elem, scale = spec.elem, spec.scale
    sgrid = scale.grid if spec.block_size is not None else None
    return _Params(
        scale_kind=_SCALE_KIND[scale.kind],
        ceil_rule=int(spec.scale_rule is ScaleRule.CEIL),
        exp_lo=scale.exp_range[0],
        exp_hi=scale.exp_range[1],
        elem_emax=elem.emax,
        elem_max=elem.max,
        elem_mant=elem.max / 2.0**elem.emax,
        e_emin=elem.grid.emin,
        e_mbits=elem.grid.mbits,
        s_emin=sgrid.emin if sgrid else 0,
        s_mbits=sgrid.mbits if sgrid else 0,
        s_max=sgrid.max if sgrid else 0.0,
        g=0.0,
    )


def _threads(x: torch.Tensor) -> int:
    return torch.get_num_threads() if x.numel() >= PARALLEL_MIN_NUMEL else 1


def fake_quant_blocks(x4: torch.Tensor, spec) -> torch.Tensor:
    """``quant.mx._fake_quant_blocks(x4, spec, None)`` for a (pre, nblocks, block, post) tensor that
    ``supports`` accepts: same values, bit for bit."""
    pre, nb, bs, post = x4.shape
    return _quantize(x4.contiguous(), spec, pre * nb, bs, post)


def fake_quant_along(x: torch.Tensor, spec, axis: int) -> torch.Tensor | None:
    """``quant.mx.quantize_spec(x, spec, axis=axis)`` straight from x's own memory, for an input that
    ``supports`` accepts, whose blocks tile ``axis`` exactly and that is contiguous (or becomes so
    with ``axis`` moved last, as ``W.t()`` does): a contiguous tensor *is* the kernel's (pre,
    nblocks, block, post) layout, so no view, pad or copy is made (each costs microseconds, and a
    tiny model quantizes ~30 tensors a step). None where that does not hold (ragged blocks, other
    strides): the caller takes the general path."""
    if not -x.dim() <= axis < x.dim():  # also a 0-d x; the general path raises or handles it
        return None
    axis %= x.dim()
    bs = spec.block_size
    if not x.is_contiguous():
        moved = x.movedim(axis, -1)
        if not moved.is_contiguous() or moved.shape[-1] % bs:
            return None
        return _quantize(moved, spec, moved.numel() // bs, bs, 1).movedim(-1, axis)
    n = x.shape[axis]
    if n % bs:
        return None
    post = math.prod(x.shape[axis + 1 :])
    return _quantize(x, spec, x.numel() // (bs * post) if x.numel() else 0, bs, post)


def _quantize(x: torch.Tensor, spec, ntiles: int, bs: int, post: int) -> torch.Tensor:
    """The block kernel on a contiguous x seen as (ntiles, bs, post), blocks along the middle dim."""
    kernels = _kernels()[x.dtype]
    out = torch.empty_like(x)
    if x.numel() == 0:
        return out
    threads, params = _threads(x), _params(spec)
    maxima = None
    if spec.global_scale:
        # Two passes: every block's amax (kept), whose largest is the tensor's amax; then
        # g = amax_tensor / (max_elem * max_scale) in fp32 with quant.mx's guard for 0, Inf and NaN.
        maxima = torch.empty(ntiles * post, dtype=torch.int32)
        bits = kernels.block_maxima(x.data_ptr(), maxima.data_ptr(), ntiles, bs, post, threads)
        g = np.array(bits, np.uint32).view(np.float32) / np.float32(spec.elem.max * spec.scale.max)
        params = _Params.from_buffer_copy(params)
        params.g = float(g) if g > 0 and np.isfinite(g) else 1.0
    kernels.quantize(
        x.data_ptr(),
        out.data_ptr(),
        ntiles,
        bs,
        post,
        None if maxima is None else maxima.data_ptr(),
        ctypes.byref(params),
        threads,
    )
    return out


def fake_quant_elementwise(x: torch.Tensor, spec) -> torch.Tensor:
    """``quant.mx._fake_quant_elementwise(x, spec, None)`` for an input that ``supports`` accepts."""
    kernels = _kernels()[x.dtype]
    x = x.contiguous()
    out = torch.empty_like(x)
    if x.numel() == 0:
        return out
    bf16 = int(spec.elem.grid == _BF16_GRID)
    kernels.round(x.data_ptr(), out.data_ptr(), x.numel(), bf16, ctypes.byref(_params(spec)), _threads(x))
    return out
