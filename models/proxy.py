"""The synthetic proxy of the MX-instability study (§3 of our notes): a residual-MLP student fitting
a frozen random teacher of the same architecture without LayerNorm, under MSE.

Student, for k = 0..L-1 (the paper's Eq. 1, with A_0 = x ∈ R^d):

    h_k = fc1_k(LN_k(A_{k-1}))          fc1: d → 4d, no bias; LN with affine weight *and* bias
    A_k = A_{k-1} + fc2_k(φ(h_k))        fc2: 4d → d, with bias

φ ∈ {gelu, relu, swiglu, linear}. SwiGLU uses h = round(8d/3) with fc1 d → 2h, so the parameter
count matches the ratio-4 MLP (the released code's choice). ``layernorm=False`` drops the LN
(the "no-LN" ablation). No final LN, default PyTorch (kaiming-uniform) init, as released.

Teacher, frozen (``requires_grad=False``), chosen by ``ProxyConfig.teacher``:

* ``residual`` — the paper's description: the student's architecture without LN.
* ``released`` — what the authors' released script (``student_teacher.py``, which produced the
  canonical run) builds: L *plain* blocks ``Linear(d, d) → φ → Linear(d, d)``, bias-free, hidden
  width d, no residual. With PyTorch's default init each Linear divides the variance by ~3, so its
  output is tiny (std ~1e-3 at L = 4 for x ~ N(0, I)): the labels are mostly noise, and the student's
  residual stream has to learn to *cancel* its identity path, which is a very different problem
  for LayerNorm's γ than imitating a residual teacher.

Data: x ~ N(0, I) drawn fresh each step from a seeded ``torch.Generator`` (never cycled), labels
``teacher(x) + noise_std · N(0, I)``.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn as nn

from models.config import PROXY_TEACHERS, ProxyConfig
from models.lm import SwiGLU

_ACTIVATIONS: dict[str, type[nn.Module]] = {
    "gelu": nn.GELU,
    "relu": nn.ReLU,
    "swiglu": SwiGLU,
    "linear": nn.Identity,
}


class ResidualBlock(nn.Module):
    """A_k = A + fc2(φ(fc1(LN(A))))."""

    def __init__(self, cfg: ProxyConfig, layernorm: bool):
        super().__init__()
        d, h = cfg.width, cfg.hidden
        self.norm = nn.LayerNorm(d) if layernorm else nn.Identity()
        self.fc1 = nn.Linear(d, 2 * h if cfg.activation == "swiglu" else h, bias=False)
        self.act = _ACTIVATIONS[cfg.activation]()
        self.fc2 = nn.Linear(h, d, bias=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.fc2(self.act(self.fc1(self.norm(x))))


class ResidualMLP(nn.Module):
    """L residual blocks, (N, d) → (N, d)."""

    def __init__(self, cfg: ProxyConfig, layernorm: bool):
        super().__init__()
        self.blocks = nn.Sequential(*(ResidualBlock(cfg, layernorm) for _ in range(cfg.depth)))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.blocks(x)


def released_teacher(cfg: ProxyConfig) -> nn.Sequential:
    """The released script's teacher: L × (Linear(d, d) → φ → Linear(d, d)), bias-free, no residual
    (SwiGLU's gate doubles the first Linear's output, as in the student)."""
    d = cfg.width
    up = 2 * d if cfg.activation == "swiglu" else d
    layers: list[nn.Module] = []
    for _ in range(cfg.depth):
        layers += [nn.Linear(d, up, bias=False), _ACTIVATIONS[cfg.activation](), nn.Linear(d, d, bias=False)]
    return nn.Sequential(*layers)


TEACHERS: dict[str, Callable[[ProxyConfig], nn.Module]] = {
    "residual": lambda cfg: ResidualMLP(cfg, layernorm=False),
    "released": released_teacher,
}
"""``ProxyConfig.teacher`` → the teacher's builder (drawn from the global RNG, before the student)."""
assert set(TEACHERS) == set(PROXY_TEACHERS), "models.config.PROXY_TEACHERS and TEACHERS disagree"


def make_teacher_student(cfg: ProxyConfig, seed: int = 0) -> tuple[nn.Module, ResidualMLP]:
    """The frozen teacher and a fresh student, both from ``seed`` (teacher drawn first), on CPU.

    The global RNG is untouched. The student's weights do not depend on ``cfg.layernorm`` (LN has
    no random init), so LN/no-LN students of one seed start from the same linear weights."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        teacher = TEACHERS[cfg.teacher](cfg)
        student = ResidualMLP(cfg, layernorm=cfg.layernorm)
    teacher.requires_grad_(False).eval()
    return teacher, student


@torch.no_grad()
def proxy_batch(
    teacher: nn.Module,
    batch_size: int,
    width: int,
    generator: torch.Generator,
    noise_std: float = 1e-3,
) -> tuple[torch.Tensor, torch.Tensor]:
    """One fresh batch (x, y): x ~ N(0, I) of shape (batch_size, width), y = teacher(x) + noise.

    Both are drawn from ``generator`` (on its device; a CPU generator gives the same data on any
    device) and returned on the teacher's device."""
    device = next(teacher.parameters()).device
    x = torch.randn(batch_size, width, generator=generator, device=generator.device)
    noise = torch.randn(batch_size, width, generator=generator, device=generator.device)
    x = x.to(device)
    return x, teacher(x) + noise_std * noise.to(device)


__all__ = [
    "TEACHERS",
    "ResidualBlock",
    "ResidualMLP",
    "make_teacher_student",
    "proxy_batch",
    "released_teacher",
]
