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
