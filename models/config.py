"""Model schemas: ``LMConfig`` (the OLMo-style LM) and ``ProxyConfig`` (the student–teacher MLP).

Both subclass ``ModelConfig``, the type of a run's ``model`` (the ``model`` config group: each option
is typed by its own schema, and OmegaConf accepts a subclass where the base is declared). They are
validated in ``__post_init__``; an invalid value fails at construction with a message naming the
field (``model.<field>``) and how to fix it. They are plain (not frozen) dataclasses because Hydra
merges overrides into them; treat them as values. They hold *sizes only*: precision is the ``quant``
policy's business, never the model's.

Parameter count and FLOP convention
-----------------------------------
``n_params`` is the exact number of trainable parameters of the built student/LM (tested against
``numel``). For the LM with the default GeLU MLP it is the instability study's formula

    N = 12·L·d² + 2·V·d + 4·L·d + d

(attention 4d² + MLP 8d² per block; untied embedding and head 2·V·d; four LayerNorm weights per
block — attention LN, MLP LN, q-norm, k-norm — and the final LN; no biases anywhere). Embeddings
are included, as in the study. ``flops_per_token`` is ``6·N``, so the compute of a run is
``C = 6·N·D`` for D training tokens (proxy: D samples): the attention score/value FLOPs
(∝ T·d per layer per token) are *not* counted. Emulated MX does not change FLOPs, so budgets are
nominal bf16-equivalent compute.
"""

from __future__ import annotations

from dataclasses import dataclass

HEAD_DIM = 64
"""Default head size: d = 64·L and n_heads = d / 64 (the study's shape rule)."""

LM_MLPS = ("gelu", "swiglu")
LM_INITS = ("width", "fan_in")
PROXY_ACTIVATIONS = ("gelu", "relu", "swiglu", "linear")
PROXY_TEACHERS = ("residual", "released")
"""The proxy's teachers; ``models.proxy.TEACHERS`` builds each (checked equal at import)."""


def swiglu_hidden(width: int) -> int:
    """SwiGLU hidden size h = round(8d/3): its 3·h·d weights match the 8·d² of a ratio-4 MLP."""
    return round(8 * width / 3)


def _check_min(field: str, value: int | float | None, low: int | float) -> None:
    if value is not None and not value >= low:
        raise ValueError(f"model.{field} must be >= {low}, got {value}")


def _check_choice(field: str, value: str, choices: tuple[str, ...]) -> None:
    if value not in choices:
        raise ValueError(f"model.{field}={value!r} is unknown; use one of: {', '.join(choices)}")


@dataclass
class ModelConfig:
    """The base of every model schema: what a run's ``model`` field is declared as. A run's task
    (``train.tasks.TASKS``) names the subclass its model must be."""


@dataclass
class LMConfig(ModelConfig):
    """The decoder-only LM of ``models.lm``. Width and heads follow the depth unless overridden."""

    depth: int = 4
    """Number of transformer blocks L."""
    vocab_size: int = 32000
    """V (Llama-2 tokenizer in the study)."""
    d_model: int | None = None
    """Width d; default 64·depth."""
    n_heads: int | None = None
    """Attention heads; default d / 64 (head size 64)."""
    mlp: str = "gelu"
    """``gelu`` (ratio-4 MLP, as the study) or ``swiglu`` (hidden round(8d/3), same parameters)."""
    rope_theta: float = 10000.0
    """RoPE base."""
    init_std: str = "width"
    """Base σ of every Linear's truncated-normal init: ``width`` = 1/√d for all of them (the study's
    description), ``fan_in`` = 1/√in_features (OLMo's code; only ``mlp.down`` differs, 1/√(4d))."""

    def __post_init__(self):
        _check_min("depth", self.depth, 1)
        _check_min("vocab_size", self.vocab_size, 1)
        _check_min("d_model", self.d_model, 1)
        _check_min("n_heads", self.n_heads, 1)
        _check_choice("mlp", self.mlp, LM_MLPS)
        _check_choice("init_std", self.init_std, LM_INITS)
        if not self.rope_theta > 0:
            raise ValueError(f"model.rope_theta must be > 0, got {self.rope_theta}")
        d = self.width
        if self.n_heads is None and d % HEAD_DIM:
            raise ValueError(
                f"model.d_model={d} is not a multiple of {HEAD_DIM}; set model.n_heads explicitly "
                f"(d_model must be divisible by it)"
            )
        if d % self.heads:
            raise ValueError(f"model.d_model={d} must be divisible by model.n_heads={self.heads}")
        if self.head_dim % 2:
            raise ValueError(
                f"head size d_model/n_heads={self.head_dim} must be even for RoPE; change model.n_heads"
            )

    @property
    def width(self) -> int:
        """The resolved model width d."""
        return self.d_model if self.d_model is not None else HEAD_DIM * self.depth

    @property
    def heads(self) -> int:
        """The resolved number of attention heads."""
        return self.n_heads if self.n_heads is not None else self.width // HEAD_DIM

    @property
    def head_dim(self) -> int:
        return self.width // self.heads

    @property
    def hidden(self) -> int:
        """MLP hidden size: 4d for GeLU, round(8d/3) for SwiGLU (whose up-projection is d → 2h)."""
        return 4 * self.width if self.mlp == "gelu" else swiglu_hidden(self.width)

    @property
    def n_params(self) -> int:
        """Exact parameter count, embeddings included (see the module docstring)."""
        L, V, d = self.depth, self.vocab_size, self.width
        mlp = 8 * d * d if self.mlp == "gelu" else 3 * self.hidden * d
        return L * (4 * d * d + mlp + 4 * d) + 2 * V * d + d

    @property
    def flops_per_token(self) -> int:
        """Training FLOPs per token, ``6·N`` (so C = 6·N·D; attention FLOPs not counted)."""
        return 6 * self.n_params


@dataclass
class ProxyConfig(ModelConfig):
    """The residual-MLP student and its frozen teacher of ``models.proxy``."""

    depth: int = 4
    """Residual blocks L (student and teacher)."""
    width: int = 512
    """Residual width d; the hidden size is 4d (round(8d/3) for SwiGLU)."""
    activation: str = "gelu"
    """φ: ``gelu``, ``relu``, ``swiglu`` or ``linear`` (identity)."""
    layernorm: bool = True
    """Pre-block LayerNorm (affine + bias) in the student; the teacher never has one."""
    noise_std: float = 1e-3
    """σ of the Gaussian label noise (the paper's 1e-3; the released scripts used 5e-3)."""
    teacher: str = "residual"
    """The frozen teacher: ``residual`` (the paper's text: the student without LayerNorm) or
    ``released`` (the authors' released script: L plain blocks d → d → d, bias-free, no residual)."""

    def __post_init__(self):
        _check_min("depth", self.depth, 1)
        _check_min("width", self.width, 1)
        _check_choice("activation", self.activation, PROXY_ACTIVATIONS)
        _check_choice("teacher", self.teacher, PROXY_TEACHERS)
        if not self.noise_std >= 0:
            raise ValueError(f"model.noise_std must be >= 0, got {self.noise_std}")

    @property
    def hidden(self) -> int:
        return swiglu_hidden(self.width) if self.activation == "swiglu" else 4 * self.width

    def _block_params(self, layernorm: bool) -> int:
        d, h = self.width, self.hidden
        up = 2 * h if self.activation == "swiglu" else h
        return d * up + h * d + d + (2 * d if layernorm else 0)  # fc1, fc2 (+ its bias), LN γ and β

    @property
    def n_params(self) -> int:
        """Exact trainable parameter count of the student."""
        return self.depth * self._block_params(self.layernorm)

    @property
    def teacher_n_params(self) -> int:
        """Parameter count of the (frozen) teacher: the student without LayerNorm (``residual``),
        or L bias-free d → d → d blocks (``released``; d → 2d → d for SwiGLU's gate)."""
        if self.teacher == "released":
            d = self.width
            return self.depth * ((2 * d if self.activation == "swiglu" else d) * d + d * d)
        return self.depth * self._block_params(False)

    @property
    def flops_per_token(self) -> int:
        """Training FLOPs per sample, ``6·N`` (student only; the teacher's forward is data cost)."""
        return 6 * self.n_params
