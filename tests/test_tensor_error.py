"""train/tensor_error.py: the block-quantization error and flushed fraction of one tensor (a block built
so that the ceil rule flushes what the floor rule keeps), the probe on a real tiny LM run's checkpoint,
its CLI, and the table analysis builds from its rows."""

from __future__ import annotations

import math

import launching
import numpy as np
import pandas as pd
import pytest
import torch
from test_presets import TINY

from analysis import lmstudy
from records import read_metrics
from train import tensor_error as te


def test_ceil_flushes_what_floor_keeps_in_a_narrow_format():
    # one E2M1 block: max 1.6, 31 values of 0.1. Floor: scale 2**(0 − 2) = 0.25, 1.6 clamps to 1.5 and
    # 0.1/0.25 = 0.4 rounds to the subnormal 0.5 (kept). Ceil: scale 0.5 (≥ 1.6/6), 0.1/0.5 = 0.2 rounds
    # to 0: all 31 flushed, and its error is larger although its max no longer clamps.
    t = torch.tensor([[1.6] + [0.1] * 31])
    mse_floor, flushed_floor, norm_floor = te.errors(t, te.Measured("fp4_e2m1", "floor"))
    mse_ceil, flushed_ceil, norm_ceil = te.errors(t, te.Measured("fp4_e2m1", "ceil"))
    assert flushed_floor == 0.0 and flushed_ceil == pytest.approx(31 / 32)
    energy = 1.6**2 + 31 * 0.01
    assert mse_floor == pytest.approx((0.1**2 + 31 * 0.025**2) / energy)
    assert mse_ceil == pytest.approx((0.1**2 + 31 * 0.1**2) / energy)
    # the norm: floor keeps 1.5 and 31 × 0.125 (rounded up), ceil 1.5 (3.2 units → 3) and nothing else
    assert norm_floor == pytest.approx(((1.5**2 + 31 * 0.125**2) / energy) ** 0.5)
    assert norm_ceil == pytest.approx((1.5**2 / energy) ** 0.5)
    # E4M3 has the range: nothing flushed under either rule, and ceil removes the clamp's error
    assert te.errors(t, te.Measured("fp8_e4m3", "ceil"))[1] == 0.0 == te.errors(t, te.Measured("fp8_e4m3"))[1]
    assert all(math.isnan(v) for v in te.errors(torch.zeros(2, 32), te.Measured("fp4_e2m1")))


def test_the_floor_rules_clamp_shrinks_a_tensor_more_in_smaller_blocks():
    # Gaussian blocks under E8M0: floor puts a block's max in [4, 8) of E2M1's units and clamps what lies
    # above 6, so the tensor shrinks, the more the more maxima (smaller blocks); ceil never clamps, and
    # rounding to nearest keeps the norm to within its flushed values
    t = torch.randn(256, 256, generator=torch.Generator().manual_seed(1))

    def norm(rule, block):
        return te.errors(t, te.Measured("fp4_e2m1", rule, block))[2]

    assert norm("floor", 8) < norm("floor", 16) < norm("floor", 32) < 0.99
    assert all(abs(norm("ceil", b) - 1) < 0.01 for b in (8, 16, 32))


def test_study_2s_inversion_sits_256x_lower_under_ue5m3_where_gradients_live():
    # gradient-sized Gaussian values (σ 3e-5: a loss averaged over thousands of tokens). UE4M3 scales
    # alone cannot reach them (every block's scale rounds to 0); under a per-tensor scale finer blocks
    # help as for any σ; UE5M3 alone reaches them but at the bottom of its range, where finer blocks
    # lose more: study 2's inversion. UE5M3 is UE4M3 with 5 exponent bits, so its scale grid is
    # UE4M3's moved down 2**8: the same errors as UE4M3 alone on the tensor × 256, bit for bit.
    t = torch.randn(64, 256, generator=torch.Generator().manual_seed(0)) * 3e-5

    def mse(block, scale, glob=False, x=t):
        return te.errors(x, te.Measured("fp4_e2m1", "floor", block, scale, glob))

    assert mse(8, "ue5m3")[0] > mse(16, "ue5m3")[0] > mse(32, "ue5m3")[0]
    assert mse(8, "ue4m3", True)[0] < mse(16, "ue4m3", True)[0] < mse(32, "ue4m3", True)[0]
    assert mse(8, "ue4m3", True)[0] < mse(8, "ue5m3")[0] / 2
    for block in (8, 16, 32):
        assert mse(block, "ue4m3") == (1.0, 1.0, 0.0)  # all flushed
        assert mse(block, "ue5m3") == mse(block, "ue4m3", x=t * 256)
    names = [m.name + "/" + m.rule for m in te.FP4_BLOCKS]
    assert len(set(names)) == len(names) == 18 and "fp4_e2m1-bs8-ue4m3-global/floor" in names
    assert {"mxfp4_e2m1-bs8/ceil", "mxfp4_e2m1-bs16/ceil", "fp4_e2m1/ceil"} <= set(names)
    assert "fp4_e2m1-ue5m3-global/floor" in names
    assert te.Measured("fp4_e2m1", "ceil").name == "fp4_e2m1"  # MX blocks keep their keys (results 3.3)


def test_probe_on_a_tiny_lm_run_and_the_table_from_its_rows(tmp_path):
    out = tmp_path / "sweep"
    r = launching.launch("-m", "experiment=lm_scale_rule", f"hydra.sweep.dir={out}", "sweep.progress=false",
                         "logger=disabled", *TINY["lm_scale_rule"])  # fmt: skip
    assert r.returncode == 0, r.stderr[-2000:]
    assert te.main([str(out)]) == 0  # the bf16 run(s) only
    files = sorted(out.glob("*/tensor_error.jsonl"))
    assert [f.parent.name.split("_C")[0] for f in files] == ["bf16"]
    (row,) = read_metrics(files[0])
    keys = [k for k in row if k != "step"]
    assert len(keys) == 3 * 5 * len(te.MX)  # 3 metrics × 5 operands × 10 (format, rule)
    assert all(np.isfinite(row[k]) for k in keys)
    for o in ("W", "X", "X_T", "dY", "dY_T"):  # 2 mantissa bits lose more than 3, whatever the tensor
        assert row[f"rel_mse/{o}/fp8_e5m2/floor"] > row[f"rel_mse/{o}/fp8_e4m3/ceil"]
        assert 0 <= row[f"flushed/{o}/fp4_e2m1/floor"] <= 1
    # a second set adds its keys to the same row (same checkpoint), keeping the first set's
    assert te.main([str(out), "--formats", "fp4_blocks"]) == 0
    (both,) = read_metrics(files[0])
    assert {k: both[k] for k in row} == row
    assert len(both) - 1 == 3 * 5 * len({m.name + m.rule for m in (*te.MX, *te.FP4_BLOCKS)})
    # a tiny LM's gradients are small: UE4M3 alone flushes far more of them than under a per-tensor scale
    assert both["flushed/dY/fp4_e2m1-ue4m3/floor"] > 2 * both["flushed/dY/fp4_e2m1-ue4m3-global/floor"]
    table = lmstudy.tensor_error_table(pd.DataFrame([row, row]))
    assert len(table) == len(te.MX) and list(table.columns[:2]) == ["format", "rule"]
    got = table.set_index(["format", "rule"]).loc[("fp4_e2m1", "ceil"), "flushed/dY_T"]
    assert got == pytest.approx(row["flushed/dY_T/fp4_e2m1/ceil"])
    assert te.main([str(tmp_path / "nothing")]) == 2
