"""Measured quantization MSE: Gaussian samples (and any fp32 tensor) through the project's quantizer,
``quant.quantize``, with the same arguments as the closed form of ``theory``.

``monte_carlo`` (mean((Q(x) − x)²)/σ² of a seeded σ·randn sample), ``gaussian_sample`` (that sample),
``_quant_error`` (the summed squared error of any tensor, shared with ``weights``) and ``torch_threads``
(the intra-op thread count the study runs with). torch is imported on use.
"""

from __future__ import annotations

from contextlib import contextmanager

from analysis.blocksize.theory import DEFAULT_N, Variant, variant


def _quant_error(x, v: Variant, block_size: int, elem: str):
    """Sum of squared quantization errors of fp32 tensor x (blocks along its last dim), in float64."""
    import quant

    # The C kernel (eager where it does not apply): compiling a graph per spec would cost more here.
    with quant.use_backend("native"):
        q = quant.quantize(
            x,
            elem,
            block_size=int(block_size),
            scale=v.scale,
            scale_rule=v.scale_rule,
            global_scale=v.global_scale,
        )
    return float(((q - x).double() ** 2).sum())


def gaussian_sample(sigma: float, n: int = DEFAULT_N, seed: int = 0):
    """The fp32 tensor the Monte Carlo quantizes: σ·randn(n) from a seeded generator (σ·r in fp32,
    so scaling σ by a power of two scales every sample exactly)."""
    import torch

    gen = torch.Generator().manual_seed(int(seed))
    return torch.randn(int(n), generator=gen, dtype=torch.float32) * torch.tensor(sigma, dtype=torch.float32)


def monte_carlo(
    sigma: float,
    block_size: int,
    scale: str = "ue4m3",
    *,
    global_scale: bool = False,
    elem: str = "fp4_e2m1",
    scale_rule: str | None = None,
    n: int = DEFAULT_N,
    seed: int = 0,
) -> float:
    """Measured mean((Q(x) − x)²)/σ² for x = σ·randn(n) (seeded) quantized by ``quant.quantize``
    in blocks of ``block_size`` (n is rounded down to a multiple of it). Same arguments as
    ``relative_mse``; the same seed gives the same standard normals for every σ and block size."""
    v = variant(scale, global_scale=global_scale, scale_rule=scale_rule)
    m = (int(n) // int(block_size)) * int(block_size)
    if m == 0:
        raise ValueError(f"n={n} is smaller than block_size={block_size}")
    x = gaussian_sample(sigma, int(n), seed)[:m]
    return _quant_error(x, v, block_size, elem) / m / sigma**2


@contextmanager
def torch_threads(n: int | None):
    """Run with ``n`` intra-op threads (None: leave as is). The study's tensors are small; on a busy
    machine extra threads mostly spin against each other (measured: 2 threads 30–60× slower than 1 on a
    loaded 2-core box), so the study defaults to 1."""
    import torch

    old = torch.get_num_threads()
    if n is not None:
        torch.set_num_threads(int(n))
    try:
        yield
    finally:
        torch.set_num_threads(old)
