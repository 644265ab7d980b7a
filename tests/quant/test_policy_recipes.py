"""A recipe fixes its block size and scale: a policy that sets another is refused (issue 11/12: it
trained block 16 and recorded "bs=8")."""

import pytest

from quant import QuantPolicy


def test_a_recipe_with_a_conflicting_block_size_is_refused():
    with pytest.raises(ValueError, match=r"precision.block_size=8 conflicts with precision.w=nvfp4"):
        QuantPolicy(w="nvfp4", a="nvfp4", block_size=8)
    with pytest.raises(ValueError, match="scale_rule"):
        QuantPolicy(w="mxfp8_e4m3", a="mxfp8_e4m3", scale_rule="ceil")
    QuantPolicy(w="nvfp4", a="nvfp4", block_size=16)  # the recipe's own value: fine
    QuantPolicy(w="fp4_e2m1", a="fp4_e2m1", block_size=8)  # an element format takes the setting
    QuantPolicy(w="mxfp8_e4m3", a="fp8_e4m3", block_size=16)  # ... and is what it is for here


def test_print_model_shows_only_what_is_quantized():
    """Issue 12: MXSoftmax said w=fp8_e4m3, a=fp8_e4m3 although softmax is not quantized."""
    import quant
    from models import LMConfig
    from models.lm import build_lm

    m = build_lm(LMConfig(depth=1, d_model=32, n_heads=2, vocab_size=256))
    quant.convert(m, QuantPolicy(w="fp8_e4m3", a="fp8_e4m3", norm_affine="fp8_e4m3", quantize_backward=False))
    text = str(m)
    lines = {line.split(":", 1)[0].strip(): line for line in text.splitlines() if ": MX" in line}
    assert "(softmax)" in lines and "not quantized" in lines["(softmax)"] and "w=" not in lines["(softmax)"]
    assert "not quantized" in lines["(qk)"] and "affine=fp8_e4m3" in lines["(attn_norm)"]
    assert "w=fp8_e4m3, a=fp8_e4m3, forward only" in lines["(qkv)"]
    quant.set_policy(m, QuantPolicy(vector_ops="bf16", attention=True, a="fp8_e5m2"))
    text = str(m)
    assert "bf16 rounding" in text and "attention a=fp8_e5m2" in text and "vector_ops=bf16" in text


def test_a_per_tensor_scale_on_an_element_format_is_nvfp4_at_any_block_size():
    """precision.global_scale puts NVFP4's per-tensor fp32 scale above any float block scale: blocks of
    16 under UE4M3 are the nvfp4 recipe bit for bit, in every role; a recipe keeps its own setting and
    E8M0 (power-of-two scales, nothing to gain) refuses it in words that name the fix."""
    import torch

    import quant

    mine = QuantPolicy(w="fp4_e2m1", a="fp4_e2m1", block_size=16, scale="ue4m3", global_scale=True)
    recipe = QuantPolicy(w="nvfp4", a="nvfp4")
    g = torch.Generator().manual_seed(0)
    x = torch.randn(8, 64, generator=g) * 1e-5  # gradient-sized: under UE4M3's range without the scale
    for role in ("w", "a", "g_dgrad", "g_wgrad"):
        assert mine.spec(role) == recipe.spec(role)
        assert torch.equal(quant.quantize_spec(x, mine.spec(role)), quant.quantize_spec(x, recipe.spec(role)))
    alone = QuantPolicy(w="fp4_e2m1", a="fp4_e2m1", block_size=16, scale="ue4m3")
    assert not alone.spec("g_dgrad").global_scale
    assert not quant.quantize_spec(x, alone.spec("g_dgrad")).any()  # every block's scale underflows
    fine = QuantPolicy(w="fp4_e2m1", a="fp4_e2m1", block_size=8, scale="ue4m3", global_scale=True)
    assert fine.spec("g_wgrad").block_size == 8 and fine.spec("g_wgrad").global_scale
    assert QuantPolicy(w="nvfp4", a="nvfp4", global_scale=True).spec("w") == recipe.spec("w")
    with pytest.raises(ValueError, match=r"global_scale=True conflicts with precision.w=mxfp4_e2m1"):
        QuantPolicy(w="mxfp4_e2m1", a="mxfp4_e2m1", global_scale=True)
    with pytest.raises(ValueError, match=r"needs a float block scale.*precision.scale=ue4m3"):
        QuantPolicy(w="fp4_e2m1", a="fp4_e2m1", global_scale=True)


def test_grad_scale_rule_changes_only_the_gradient_roles_blocks():
    """``grad_scale_rule=ceil`` under a floor forward: the gradients' blocks never clamp their max,
    weights and activations (forward and backward) keep floor's clamp."""
    import torch

    from quant.formats import ScaleRule
    from quant.mx import quantize_spec
    from records.precision import label

    p = QuantPolicy.uniform("fp4_e2m1", grad_scale_rule="ceil")
    rules = {role: p.spec(role).scale_rule for role in ("w", "a", "w_bwd", "a_bwd", "g_dgrad", "g_wgrad")}
    assert rules == {
        "w": ScaleRule.FLOOR, "a": ScaleRule.FLOOR, "w_bwd": ScaleRule.FLOOR, "a_bwd": ScaleRule.FLOOR,
        "g_dgrad": ScaleRule.CEIL, "g_wgrad": ScaleRule.CEIL,
    }  # fmt: skip
    # a block whose max is 7 × 2^k in E2M1's units under floor: clamped to 6 in W, kept in the gradient
    x = torch.tensor([7.0] + [1.0] * 31)
    assert quantize_spec(x, p.spec("w")).max() == 6.0 and quantize_spec(x, p.spec("g_dgrad")).max() == 8.0
    assert "grad_ceil" in label({"w": "fp4_e2m1", "a": "fp4_e2m1", "grad_scale_rule": "ceil"})
