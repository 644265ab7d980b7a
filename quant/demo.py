"""``python -m quant.demo``: what the MX numerics do, in three small experiments.

1. The format table (one convention, see ``quant.formats``).
2. The LayerNorm clamping mechanism of the instability study: γ clustered just below 1.0 is clamped
   to 0.875 by E4M3 blocks, a multiplicative bias; γ = 1.0 is not.
3. The "Is finer better?" effect: FP4 with UE4M3 scales gets *worse* at small block sizes for narrow
   tensors (σ = 0.005) because block scales underflow; UE5M3 does not.
4. Gradient fidelity of a quantized MLP per recipe, full MX vs forward-only, against fp32.
"""

from __future__ import annotations

import argparse

import torch

import quant
from quant.formats import ELEM_FORMATS, RECIPES, SCALE_FORMATS


def _table() -> None:
    print("Element formats (mbits = stored mantissa bits; no sign, no implicit bit)")
    print(f"  {'name':10s} {'bits':>4s} {'ebits':>5s} {'mbits':>5s} {'emin':>5s} {'emax':>5s} {'max':>12s}")
    for f in ELEM_FORMATS.values():
        g = f.grid
        print(f"  {f.name:10s} {f.bits:4d} {f.ebits:5d} {f.mbits:5d} {g.emin:5d} {g.emax:5d} {g.max:12.6g}")
    print("Scale formats: " + ", ".join(f"{s.name} (max {s.max:.6g})" for s in SCALE_FORMATS.values()))
    print("Recipes: " + ", ".join(RECIPES))


def _layernorm_clamping() -> None:
    print("\nLayerNorm γ in one 32-block, fp8_e4m3 / E8M0 floor (instability study, §mechanism)")
    g = torch.Generator().manual_seed(0)
    worked = torch.tensor([0.8974, 0.8963, 0.8836, 0.8847, 0.9037])
    gamma = torch.cat(
        [worked, torch.exp(torch.log(torch.tensor(0.95)) + 0.01 * torch.randn(27, generator=g))]
    )
    for fmt in ("fp8_e4m3", "fp8_e5m2", "fp6_e3m2", "fp6_e2m3", "fp4_e2m1"):
        q = quant.quantize(gamma, fmt)
        bias = ((q - gamma) / gamma).mean().item()
        print(
            f"  {fmt:9s} worked example -> {[round(v, 4) for v in q[:5].tolist()]}  "
            f"clip fraction {quant.clip_fraction(gamma, fmt):.2f}  mean relative bias {bias:+.3%}"
        )
    print(f"  γ = 1.0 everywhere: clip fraction {quant.clip_fraction(torch.ones(32), 'fp8_e4m3'):.2f}")


def _block_size_effect(n: int) -> None:
    print("\nFP4 E2M1 relative MSE vs block size, σ = 0.005 (Monte Carlo, 'Is finer better?')")
    g = torch.Generator().manual_seed(0)
    x = 0.005 * torch.randn(n, generator=g)
    blocks = (4, 8, 16, 32, 64, 128)
    print("  " + f"{'scale':18s}" + "".join(f"{b:>9d}" for b in blocks))
    variants = [("ue4m3", False), ("ue4m3", True), ("ue5m3", False), ("e8m0", False), ("fp32", False)]
    for scale, glob in variants:
        errs = []
        for b in blocks:
            q = quant.quantize(x, "fp4_e2m1", block_size=b, scale=scale, global_scale=glob)
            errs.append(((q - x).square().mean() / x.square().mean()).item())
        name = scale + (" + global" if glob else "")
        print("  " + f"{name:18s}" + "".join(f"{e:9.4f}" for e in errs))


def _mlp_gradients() -> None:
    print("\nTwo-layer MLP (256 tokens, 256 -> 1024 -> 256, GeLU): gradient error against fp32")
    g = torch.Generator().manual_seed(0)
    x = torch.randn(256, 256, generator=g)
    w1 = torch.randn(1024, 256, generator=g) / 16
    w2 = torch.randn(256, 1024, generator=g) / 32

    def grads(policy):
        mlp = torch.nn.Sequential(
            torch.nn.Linear(256, 1024, bias=False), torch.nn.GELU(), torch.nn.Linear(1024, 256, bias=False)
        )
        with torch.no_grad():
            mlp[0].weight.copy_(w1)
            mlp[2].weight.copy_(w2)
        quant.convert(mlp, policy)
        mlp(x).square().mean().backward()
        return torch.cat([mlp[0].weight.grad.flatten(), mlp[2].weight.grad.flatten()])

    ref = grads(quant.QuantPolicy())
    for name in ("mxfp8_e4m3", "mxfp8_e5m2", "mxfp6_e3m2", "mxfp6_e2m3", "mxfp4_e2m1", "mxint8", "nvfp4"):
        for fwd_only in (False, True):
            gq = grads(quant.QuantPolicy.uniform(name, quantize_backward=not fwd_only))
            cos = torch.nn.functional.cosine_similarity(gq, ref, dim=0).item()
            rel = ((gq - ref).square().sum() / ref.square().sum()).item()
            tag = name + (" fwd-only" if fwd_only else "")
            print(f"  {tag:22s} cos {cos:.6f}   ||g-g32||²/||g32||² {rel:.2e}")


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--numel", type=int, default=1 << 20, help="Monte Carlo sample size")
    args = ap.parse_args(argv)
    _table()
    _layernorm_clamping()
    _block_size_effect(args.numel)
    _mlp_gradients()


if __name__ == "__main__":
    main()
