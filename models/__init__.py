"""Precision-agnostic models: the OLMo-style LM and the student–teacher MLP proxy.

Models are built from plain modules only (``nn.Linear``, ``nn.LayerNorm``, ``nn.GELU``/``nn.ReLU``/
``nn.SiLU``, ``nn.Softmax`` and ``quant.MatMul`` for attention's QKᵀ and PV), so that
``quant.convert(model, policy)`` can make them emulate any MX policy in place. Nothing here knows
about precision, Hydra or the sweeper.

Registries, by the short names a config uses:

    CONFIGS["lm"] = LMConfig        MODELS["lm"] = build_lm                (cfg, seed) -> LM
    CONFIGS["proxy"] = ProxyConfig  MODELS["proxy"] = make_teacher_student (cfg, seed) -> (teacher, student)

Every config has ``n_params`` (exact, embeddings included) and ``flops_per_token`` (6·N, so
C = 6·N·D); see ``models.config``. The configs are torch-free (a sweep is planned and a config
validated without torch); the modules, builders and ``MODELS`` load on first use (PEP 562).
"""

from __future__ import annotations

import importlib

from models.config import LMConfig, ModelConfig, ProxyConfig

CONFIGS: dict[str, type] = {"lm": LMConfig, "proxy": ProxyConfig}
"""Model name → its config schema."""

_LAZY = {
    "LM": "models.lm",
    "build_lm": "models.lm",
    "ResidualMLP": "models.proxy",
    "make_teacher_student": "models.proxy",
    "proxy_batch": "models.proxy",
}

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


def __getattr__(name: str):
    if name == "MODELS":  # model name → builder ``(cfg, seed)``: an ``LM``, or ``(teacher, student)``
        from models.lm import build_lm
        from models.proxy import make_teacher_student

        value = {"lm": build_lm, "proxy": make_teacher_student}
    elif name in _LAZY:
        value = getattr(importlib.import_module(_LAZY[name]), name)
    else:
        raise AttributeError(f"module 'models' has no attribute {name!r}")
    globals()[name] = value  # later lookups skip this function
    return value
