"""Inputs and a comparison shared by the fast-path tests (test_compiled.py, test_native.py)."""

from __future__ import annotations

import torch

_BITS = {torch.float32: torch.int32, torch.bfloat16: torch.int16, torch.float16: torch.int16}


def hard_input(shape, dtype, seed=0, block=32) -> torch.Tensor:
    """randn with per-block magnitudes 2**U(-20, 20), with edge-case rows written over the first
    rows: bf16-valued ties, element-grid midpoints, block maxima just below/above 2**k, fp32
    subnormals, all-zero and signed-zero blocks, Inf/NaN blocks and values near the fp32 max."""
    g = torch.Generator().manual_seed(seed)
    n = shape[-1]
    x = torch.randn(shape, generator=g)
    flat = x.reshape(-1, n)
    rows = flat.shape[0]
    nb = -(-n // block)
    mag = torch.exp2(torch.randint(-20, 21, (rows, nb), generator=g).float())
    flat.mul_(mag.repeat_interleave(block, dim=1)[:, :n])

    def put(r, values):
        if r < rows:
            v = torch.as_tensor(values, dtype=torch.float32).flatten()
            flat[r, : min(n, v.numel())] = v[:n]

    k = torch.arange(-40, 41, dtype=torch.float32)
    below = torch.nextafter(torch.exp2(k), torch.zeros(()))
    put(0, torch.randn(n, generator=g).bfloat16().float())  # many exact ties after scaling
    put(1, (torch.arange(n) % 16 + 0.5) * 0.25)  # element-grid midpoints
    put(2, below)  # block max just below 2**k: the float-log2 trap
    put(3, torch.nextafter(torch.exp2(k), torch.full((), float("inf"))))
    put(4, torch.exp2(-torch.arange(n) % 30 - 120.0))  # tiny: fp32 subnormals in many blocks
    put(5, torch.zeros(n))
    put(6, -torch.zeros(n))
    put(7, torch.tensor([float("inf")] + [1.0] * 40 + [float("nan")] + [2.0] * 40))
    put(8, torch.full((n,), 3.0e38) * torch.randn(n, generator=g).sign())
    put(9, 448.0 * torch.exp2(k) * 1.0625)  # just past the e4m3 saturation edge
    put(10, 6.0 * torch.exp2(k) * 1.125)  # just past the e2m1 saturation edge
    return x.to(dtype)


def assert_bitwise(eager: torch.Tensor, compiled: torch.Tensor, what: str) -> None:
    assert compiled.dtype == eager.dtype and compiled.shape == eager.shape, what
    bits = _BITS[eager.dtype]
    both_nan = eager.isnan() & compiled.isnan()
    bad = (eager.view(bits) != compiled.view(bits)) & ~both_nan
    if bad.any():
        i = bad.flatten().nonzero()[0].item()
        raise AssertionError(
            f"{what}: {int(bad.sum())} of {bad.numel()} elements differ; first at flat index {i}: "
            f"eager {eager.flatten()[i].item()!r} fast path {compiled.flatten()[i].item()!r}"
        )
