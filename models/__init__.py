"""Precision-agnostic models: the OLMo-style LM and the student–teacher MLP proxy.

Models are built from plain modules only (``nn.Linear``, ``nn.LayerNorm``, ``nn.GELU``/``nn.ReLU``/
``nn.SiLU``, ``nn.Softmax`` and ``quant.MatMul`` for attention's QKᵀ and PV), so that
``quant.convert(model, policy)`` can make them emulate any MX policy in place. Nothing here knows
about precision, Hydra or the sweeper.

Registries, by the short names a config uses:

    CONFIGS["lm"] = LMConfig        MODELS["lm"] = build_lm                (cfg, seed) -> LM
    CONFIGS["proxy"] = ProxyConfig  MODELS["proxy"] = make_teacher_student (cfg, seed) -> (teacher, student)

Every config has ``n_params`` (exact, embeddings included) and ``flops_per_token`` (6·N, so
C = 6·N·D); see ``models.config``.
"""

from collections.abc import Callable
from typing import Any

from models.config import LMConfig, ModelConfig, ProxyConfig
from models.lm import LM, build_lm
from models.proxy import ResidualMLP, make_teacher_student, proxy_batch

CONFIGS: dict[str, type] = {"lm": LMConfig, "proxy": ProxyConfig}
"""Model name → its config schema."""

MODELS: dict[str, Callable[[Any, int], Any]] = {"lm": build_lm, "proxy": make_teacher_student}
"""Model name → builder ``(cfg, seed)``: an ``LM``, or the proxy's ``(teacher, student)``."""

__all__ = [
    "CONFIGS",
    "LM",
    "LMConfig",
    "MODELS",
    "ModelConfig",
    "ProxyConfig",
    "ResidualMLP",
    "build_lm",
    "make_teacher_student",
    "proxy_batch",
]
