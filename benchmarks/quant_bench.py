"""CPU speed of mxsweep's fake-quant next to the memory floor and torchao's emulation.

Run from the repository root::

    .venv/bin/python benchmarks/quant_bench.py            # 4096x4096, fp32 and bf16, 7 rounds
    .venv/bin/python benchmarks/quant_bench.py --quick    # 1024x1024, 3 rounds (smoke test)
    .venv/bin/python benchmarks/quant_bench.py --eager    # also time mxsweep's eager reference

Method (docs/peers notes §4, §6b): every op is quantize followed by dequantize back to the
input dtype on one seeded ``randn`` tensor, blocks along the last dim. Each variant is called
once first (its compile time, for torch.compile variants, is reported separately), then all
variants of one dtype are timed round-robin for ``--rounds`` rounds, so drifting machine load
hits all of them alike; median, min and max are printed. The floors are ``x.clone()`` (a fresh
allocation, as every fake-quant result is) and ``out.copy_(x)`` into a preallocated buffer.

mxsweep is timed on its fast paths: ``native`` (the C kernel of ``quant.native``, what the default
``auto`` backend uses on CPU) and ``compiled`` (torch.compile, used on GPU and for what the kernel
does not cover). Targets, for the default path: mxsweep <= 3x ``x.clone()``, and >= 5x faster than
torchao's eager emulation.

What ``x.clone()`` costs depends on the allocator, not on us: a result in fresh ``mmap`` pages pays
page faults and zeroing (~4x ``copy_``); one in recycled heap memory costs about as little as
``copy_``. Left to itself (``--alloc glibc``) glibc picks either from run to run, and not
necessarily the same for the clone and for our result. ``--alloc fresh`` and ``--alloc recycled``
pin both to one state (``mallopt``), for ratios that mean the same every run; the script also
prints which state the clone was in.

A second part times a quantized Linear (forward + backward, 4096 tokens, 1024 -> 4096) made
by ``quant.convert`` against ``nn.Linear``.
"""

from __future__ import annotations

import argparse
import copy
import ctypes
import functools
import json
import os
import platform
import sys
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script from anywhere

import torch  # noqa: E402
from torch import nn  # noqa: E402

import quant  # noqa: E402
from benchmarks._timing import cpu_model, load_average, round_robin, stats_ms, warm_up  # noqa: E402
from quant import native  # noqa: E402

TARGET_VS_CLONE = 3.0  # mxsweep's default path may take at most this many x.clone() times
TARGET_VS_TORCHAO = 5.0  # and must be at least this many times faster than torchao eager

# (label, mxsweep format name, torchao MX element dtype or "nvfp4")
FORMATS = {
    "mxfp8_e4m3": ("fp8_e4m3", "float8_e4m3fn"),
    "mxfp4_e2m1": ("fp4_e2m1", "float4_e2m1fn_x2"),
    "nvfp4": ("nvfp4", "nvfp4"),
}
DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}


# ---------------------------------------------------------------------------------------------
# Environment


def load_torchao():
    """torchao's eager MX/NVFP4 emulation, or (None, reason) when it cannot be imported."""
    try:
        import torchao
        from torchao.prototype.mx_formats.config import ScaleCalculationMode
        from torchao.prototype.mx_formats.mx_tensor import to_dtype, to_mx
        from torchao.prototype.mx_formats.nvfp4_tensor import (
            NVFP4Tensor,
            per_tensor_amax_to_scale,
        )
    except Exception as e:  # ImportError, or a prototype API that moved
        return None, f"{type(e).__name__}: {e}"

    def mx(elem: str) -> Callable[[torch.Tensor], torch.Tensor]:
        dt = getattr(torch, elem)

        def run(x: torch.Tensor) -> torch.Tensor:
            scale, data = to_mx(x, dt, 32, ScaleCalculationMode.FLOOR)
            return to_dtype(data, scale, dt, 32, x.dtype)

        return run

    def nvfp4(x: torch.Tensor) -> torch.Tensor:
        pts = per_tensor_amax_to_scale(x.abs().amax())
        return NVFP4Tensor.to_nvfp4(x, 16, per_tensor_scale=pts).dequantize(x.dtype)

    return (torchao.__version__, mx, nvfp4), None


def fast_backends() -> list[str]:
    """mxsweep's fast paths here, the default (what ``auto`` picks on CPU) first."""
    return ["native", "compiled"] if native.available() else ["compiled"]


def mxsweep(fmt: str, backend: str) -> Callable[[torch.Tensor], torch.Tensor]:
    def run(x: torch.Tensor) -> torch.Tensor:
        quant.set_backend(backend)
        return quant.quantize(x, fmt)

    return run


# ---------------------------------------------------------------------------------------------
# Reporting


def fmt_ratio(r: float | None, target: float, lower_is_better: bool) -> str:
    if r is None:
        return "n/a"
    ok = r <= target if lower_is_better else r >= target
    return f"{r:6.2f}x  ({'<=' if lower_is_better else '>='} {target:g}x: {'ok' if ok else 'MISS'})"


# ---------------------------------------------------------------------------------------------
# Part 1: quantize + dequantize


def bench_quant(args, dtype_name: str, torchao) -> dict:
    dtype = DTYPES[dtype_name]
    n = args.size
    g = torch.Generator().manual_seed(0)
    x = torch.randn(n, n, generator=g).to(dtype)
    out = torch.empty_like(x)
    cases: dict[str, Callable[[], object]] = {
        "x.clone()": lambda: x.clone(),
        "out.copy_(x)": lambda: out.copy_(x),
    }
    for label in args.formats:
        fmt, ao_elem = FORMATS[label]
        for backend in fast_backends():
            cases[f"{label} mxsweep {backend}"] = functools.partial(mxsweep(fmt, backend), x)
        if args.eager:
            cases[f"{label} mxsweep eager"] = functools.partial(mxsweep(fmt, "eager"), x)
        if torchao is not None:
            _, ao_mx, ao_nvfp4 = torchao
            ao = ao_nvfp4 if ao_elem == "nvfp4" else ao_mx(ao_elem)
            cases[f"{label} torchao eager"] = functools.partial(ao, x)

    print(f"\n== quantize+dequantize, {dtype_name}, {n}x{n}, {args.rounds} rounds ==")
    first = warm_up(cases)
    times = round_robin(cases, args.rounds)
    res = {k: stats_ms(v) | {"first_call_ms": first[k][0] * 1e3} for k, v in times.items()}

    nbytes = 2 * x.numel() * x.element_size()  # read x once, write the result once
    print(f"{'variant':34s} {'median':>9s} {'min':>9s} {'max':>9s} {'GB/s':>7s}  first call")
    for k, s in res.items():
        gbs = nbytes / (s["median"] * 1e-3) / 1e9
        print(
            f"{k:34s} {s['median']:8.1f}ms {s['min']:8.1f}ms {s['max']:8.1f}ms {gbs:7.2f}  "
            f"{s['first_call_ms'] / 1e3:7.2f}s"
        )

    clone = res["x.clone()"]["median"]
    faults = clone / res["out.copy_(x)"]["median"]
    state = "fresh pages: page faults included" if faults > 2 else "recycled memory: no page faults"
    print(f"\nratios ({dtype_name}; medians; x.clone() took {faults:.1f}x out.copy_(x), {state}):")
    default = fast_backends()[0]
    print(f"(mxsweep = its default path on this machine, {default})")
    for label in args.formats:
        comp = res[f"{label} mxsweep {default}"]["median"]
        line = f"  {label:11s} mxsweep/clone {fmt_ratio(comp / clone, TARGET_VS_CLONE, True)}"
        ao = res.get(f"{label} torchao eager")
        ao_ratio = ao["median"] / comp if ao else None
        line += f"   torchao/mxsweep {fmt_ratio(ao_ratio, TARGET_VS_TORCHAO, False)}"
        eager = res.get(f"{label} mxsweep eager")
        if eager:
            line += f"   eager/{default} {eager['median'] / comp:6.2f}x"
        print(line)
        res[f"{label} ratios"] = {
            "mxsweep_over_clone": comp / clone,
            "torchao_over_mxsweep": ao_ratio,
        }
    compile_s = {label: res[f"{label} mxsweep compiled"]["first_call_ms"] / 1e3 for label in args.formats}
    print("compile (first call) s: " + ", ".join(f"{k} {v:.1f}" for k, v in compile_s.items()))
    return res


# ---------------------------------------------------------------------------------------------
# Part 2: quantized Linear forward + backward


def bench_linear(args, dtype_name: str) -> dict | None:
    dtype = DTYPES[dtype_name]
    tokens, d_in, d_out = args.linear_shape
    print(
        f"\n== Linear forward+backward, {dtype_name}, {tokens} tokens x {d_in}->{d_out}, "
        f"{args.rounds} rounds =="
    )
    try:
        convert, policy_cls = quant.convert, quant.QuantPolicy
        torch.manual_seed(0)
        ref = nn.Sequential(nn.Linear(d_in, d_out)).to(dtype)
        qmodel = copy.deepcopy(ref)
        policy = policy_cls(w="fp8_e4m3", a="fp8_e4m3")
        ret = convert(qmodel, policy)
    except (ImportError, AttributeError) as e:
        print(f"quantized Linear not available yet ({type(e).__name__}: {e})")
        return None
    except TypeError as e:  # the planned signature changed
        print(f"quantized Linear API differs from the planned one: {e}")
        return None
    if isinstance(ret, nn.Module):
        qmodel = ret
    swapped = type(qmodel[0]) is not nn.Linear
    print(f"policy {policy!r}; layer after convert: {type(qmodel[0]).__name__}")
    if not swapped:
        print("WARNING: quant.convert left nn.Linear in place; timing an unquantized layer")

    x = torch.randn(tokens, d_in, dtype=dtype, requires_grad=True)
    grad = torch.randn(tokens, d_out, dtype=dtype)

    def step(model: nn.Module) -> Callable[[], None]:
        def run() -> None:
            x.grad = None
            model.zero_grad(set_to_none=True)
            model(x).backward(grad)

        return run

    def on(backend: str, run: Callable[[], None]) -> Callable[[], None]:
        def timed_run() -> None:
            quant.set_backend(backend)
            run()

        return timed_run

    cases = {"nn.Linear": step(ref)}
    for backend in fast_backends():
        cases[f"mxsweep quantized Linear ({backend})"] = on(backend, step(qmodel))
    first = warm_up(cases)
    times = round_robin(cases, args.rounds)
    res = {k: stats_ms(v) | {"first_call_ms": first[k][0] * 1e3} for k, v in times.items()}
    flops = 3 * 2 * tokens * d_in * d_out  # forward, dgrad, wgrad GEMMs
    print(f"{'variant':38s} {'median':>9s} {'min':>9s} {'max':>9s} {'GFLOP/s':>8s}  first call")
    for k, s in res.items():
        print(
            f"{k:38s} {s['median']:8.1f}ms {s['min']:8.1f}ms {s['max']:8.1f}ms "
            f"{flops / (s['median'] * 1e-3) / 1e9:8.1f}  {s['first_call_ms'] / 1e3:7.2f}s"
        )
    for backend in fast_backends():
        ratio = res[f"mxsweep quantized Linear ({backend})"]["median"] / res["nn.Linear"]["median"]
        print(f"quantized ({backend}) / nn.Linear: {ratio:.2f}x")
        res[f"ratio {backend}"] = ratio
    res["ratio"] = res[f"ratio {fast_backends()[0]}"]
    return res


# ---------------------------------------------------------------------------------------------


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--size", type=int, default=4096, help="tensor is size x size (default 4096)")
    p.add_argument("--rounds", type=int, default=7, help="interleaved timing rounds (default 7)")
    p.add_argument("--quick", action="store_true", help="smoke run: --size 1024 --rounds 3")
    p.add_argument("--eager", action="store_true", help="also time mxsweep's (slow) eager path")
    p.add_argument("--dtypes", nargs="+", default=list(DTYPES), choices=list(DTYPES))
    p.add_argument("--formats", nargs="+", default=list(FORMATS), choices=list(FORMATS))
    p.add_argument("--no-torchao", action="store_true", help="skip the torchao columns")
    p.add_argument("--no-linear", action="store_true", help="skip the quantized Linear part")
    p.add_argument(
        "--linear-shape",
        type=int,
        nargs=3,
        default=(4096, 1024, 4096),
        metavar=("TOKENS", "IN", "OUT"),
    )
    p.add_argument(
        "--recompile-limit",
        type=int,
        default=64,
        help="torch._dynamo recompile_limit for this process (torch's default is 8; one "
        "compiled graph per QuantSpec and dtype, past the limit dynamo silently runs eager)",
    )
    p.add_argument("--threads", type=int, default=os.cpu_count(), help="default: os.cpu_count()")
    p.add_argument(
        "--alloc",
        choices=list(ALLOC_MODES),
        default="glibc",
        help="where large results come from: glibc's own choice (default; varies run to run), "
        "always fresh pages (page faults, the cost of new memory), or always recycled heap memory",
    )
    p.add_argument("--json", type=Path, help="also write all numbers to this JSON file")
    args = p.parse_args(argv)
    if args.quick:
        args.size, args.rounds = 1024, 3
        args.linear_shape = (1024, 256, 1024)
    return args


# glibc mallopt parameters (malloc.h) and the settings of each --alloc mode.
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD, _M_MMAP_MAX = -1, -3, -4
ALLOC_MODES = {
    "glibc": {},
    # every large block is its own mmap, unmapped on free: each new result is page-faulted in
    "fresh": {_M_MMAP_THRESHOLD: 128 * 1024},
    # no mmap, never trim the heap: after warm-up every result reuses memory already faulted in
    "recycled": {_M_MMAP_MAX: 0, _M_TRIM_THRESHOLD: 2**31 - 1},
}


def set_alloc_mode(mode: str) -> None:
    """Make ``x.clone()`` and mxsweep's results come from the same kind of memory (glibc only)."""
    if not ALLOC_MODES[mode]:
        return
    libc = ctypes.CDLL(None)
    for param, value in ALLOC_MODES[mode].items():
        if libc.mallopt(param, value) != 1:
            raise SystemExit(f"--alloc {mode}: mallopt({param}, {value}) failed (not glibc?)")


def main(argv=None) -> int:
    args = parse_args(argv)
    set_alloc_mode(args.alloc)
    torch.set_num_threads(args.threads)
    torch._dynamo.config.recompile_limit = max(torch._dynamo.config.recompile_limit, args.recompile_limit)
    torchao, why = (None, "--no-torchao") if args.no_torchao else load_torchao()

    print(f"python {platform.python_version()}  torch {torch.__version__}  ", end="")
    print(f"torchao {torchao[0] if torchao else 'not used (' + why + ')'}")
    print(f"cpu: {cpu_model()}; os.cpu_count()={os.cpu_count()}; torch threads={torch.get_num_threads()}")
    # Every fake-quant result is a fresh allocation: a 64 MiB one is page-faulted in 4 KiB pages
    # unless PyTorch is asked for transparent huge pages, which moves both floor and fake-quant.
    print(
        f"--alloc {args.alloc}; THP_MEM_ALLOC_ENABLE={os.environ.get('THP_MEM_ALLOC_ENABLE', 'unset')}; "
        f"load average at start {load_average()} (timings are only comparable on an idle machine)"
    )
    if torchao is None:
        print(f"NOTE: torchao columns skipped: {why}")
    print(
        f"targets: mxsweep ({fast_backends()[0]}) <= {TARGET_VS_CLONE:g}x x.clone(); "
        f">= {TARGET_VS_TORCHAO:g}x faster than torchao eager"
    )

    previous = quant.get_backend()
    results: dict = {
        "torch": torch.__version__,
        "torchao": torchao[0] if torchao else None,
        "cpu": cpu_model(),
        "threads": torch.get_num_threads(),
        "size": args.size,
        "rounds": args.rounds,
    }
    try:
        for dt in args.dtypes:
            results[f"quant {dt}"] = bench_quant(args, dt, torchao)
        if not args.no_linear:
            for dt in args.dtypes:
                results[f"linear {dt}"] = bench_linear(args, dt)
    finally:
        quant.set_backend(previous)
    results["load_average_end"] = load_average()
    print(
        f"\nload average at end {results['load_average_end']}; "
        f"dynamo recompile_limit={torch._dynamo.config.recompile_limit}"
    )
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))
        print(f"\nwrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
