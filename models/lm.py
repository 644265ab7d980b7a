"""The OLMo-style decoder-only LM of the MX-instability study (arXiv 2506.20752, §1 of our notes).

Architecture (OLMo ``block_type: sequential``):

    x = embed(tokens)                                   (B, T, d), untied from the head
    for each block:  x = x + Attn(LN(x));  x = x + MLP(LN(x))
    logits = head(LN(x))                                (B, T, V)

* LayerNorm everywhere is ``nn.LayerNorm(d, eps=1e-5, bias=False)``: affine weight, no bias.
* QK-norm: q and k are each LayerNorm-ed over the full width d, *before* the split into heads and
  before RoPE, as OLMo's ``attention_layer_norm`` does (its q/k norms are of size d, not head size).
* RoPE (theta 10000), rotate-half convention (the two halves of each head are the pair), positions
  0..T-1, computed in fp32 per call: no length limit and no buffers in the state_dict.
* No biases in any Linear; dropout none. q, k and v come from one fused ``qkv`` Linear (d → 3d). MX
  blocks run along in_features (d) in forward, so fusion changes nothing there; in dgrad the blocks
  run along 3d and align with the q/k/v split whenever d is a multiple of the block size.
* MLP: ``up`` d → 4d, GeLU (exact), ``down`` 4d → d. ``mlp="swiglu"``: ``up`` d → 2h with
  h = round(8d/3), ``silu(gate) * x``, ``down`` h → d; 3·h·d ≈ 8·d² parameters, equal when 3 | d.
* Attention is explicit: ``quant.MatMul`` for QKᵀ and PV, a -inf causal mask and an ``nn.Softmax``
  module, so ``quant.convert`` can quantize both matmuls and round the softmax. No SDPA.
* Init ("mitchell", as OLMo's ``init_weights``): truncated normal cut at ±3σ, the residual output
  projections (``attn.out``, ``mlp.down``) scaled by 1/√(2(layer+1)). Base σ = 1/√d for every weight
  (``init_std="width"``, the study's description and our default); ``init_std="fan_in"`` follows
  OLMo's code instead, which passes ``d=ff_out.in_features`` and so gives ``mlp.down`` 1/√(4d) (or
  1/√h), half the σ for the GeLU MLP. Embedding and head use 1/√d; LayerNorm weights start at 1.

The model is precision-agnostic: plain modules only. ``quant.convert(model, policy)`` makes it MX.
"""

from __future__ import annotations

import math

import torch
import torch.nn as nn

from models.config import LMConfig
from quant import MatMul

LN_EPS = 1e-5


def _norm(d: int) -> nn.LayerNorm:
    return nn.LayerNorm(d, eps=LN_EPS, bias=False)


def _trunc_normal_(weight: torch.Tensor, std: float) -> None:
    nn.init.trunc_normal_(weight, mean=0.0, std=std, a=-3 * std, b=3 * std)


class RotaryEmbedding(nn.Module):
    """RoPE on (B, H, T, hd) tensors: channel i and i + hd/2 rotate by angle t·θ^(-2i/hd)."""

    def __init__(self, head_dim: int, theta: float = 10000.0):
        super().__init__()
        inv_freq = 1.0 / theta ** (torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim)
        self.register_buffer("inv_freq", inv_freq, persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        T = x.shape[-2]
        pos = torch.arange(T, device=x.device, dtype=torch.float32)
        angles = torch.outer(pos, self.inv_freq)  # (T, hd/2)
        angles = torch.cat((angles, angles), dim=-1)  # (T, hd)
        cos, sin = angles.cos().to(x.dtype), angles.sin().to(x.dtype)
        x1, x2 = x.chunk(2, dim=-1)
        return x * cos + torch.cat((-x2, x1), dim=-1) * sin


class SwiGLU(nn.Module):
    """``silu(gate) * x`` with (x, gate) the two halves of the last dim (the SiLU is a module, so
    ``quant.convert`` sees it)."""

    def __init__(self):
        super().__init__()
        self.silu = nn.SiLU()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x, gate = x.chunk(2, dim=-1)
        return self.silu(gate) * x


class Attention(nn.Module):
    def __init__(self, cfg: LMConfig):
        super().__init__()
        d = cfg.width
        self.n_heads, self.head_dim = cfg.heads, cfg.head_dim
        self.qkv = nn.Linear(d, 3 * d, bias=False)
        self.q_norm, self.k_norm = _norm(d), _norm(d)
        self.rope = RotaryEmbedding(cfg.head_dim, cfg.rope_theta)
        self.qk = MatMul()
        self.softmax = nn.Softmax(dim=-1)
        self.pv = MatMul()
        self.out = nn.Linear(d, d, bias=False)

    def _heads(self, t: torch.Tensor) -> torch.Tensor:
        B, T, _ = t.shape
        return t.view(B, T, self.n_heads, self.head_dim).transpose(1, 2)  # (B, H, T, hd)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, T, d = x.shape
        q, k, v = self.qkv(x).split(d, dim=-1)
        q, k = self.q_norm(q), self.k_norm(k)
        q, k, v = self.rope(self._heads(q)), self.rope(self._heads(k)), self._heads(v)
        scores = self.qk(q, k.transpose(-2, -1)) / math.sqrt(self.head_dim)  # (B, H, T, T)
        future = torch.ones(T, T, dtype=torch.bool, device=x.device).triu(1)
        probs = self.softmax(scores.masked_fill(future, float("-inf")))
        y = self.pv(probs, v)  # (B, H, T, hd)
        return self.out(y.transpose(1, 2).reshape(B, T, d))


class MLP(nn.Module):
    def __init__(self, cfg: LMConfig):
        super().__init__()
        d, h = cfg.width, cfg.hidden
        gated = cfg.mlp == "swiglu"
        self.up = nn.Linear(d, 2 * h if gated else h, bias=False)
        self.act = SwiGLU() if gated else nn.GELU()
        self.down = nn.Linear(h, d, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down(self.act(self.up(x)))


class Block(nn.Module):
    """Pre-LN sequential block: x + Attn(LN(x)), then + MLP(LN(x))."""

    def __init__(self, cfg: LMConfig, layer: int):
        super().__init__()
        self.layer, self.width, self.init_fan_in = layer, cfg.width, cfg.init_std == "fan_in"
        self.attn_norm, self.attn = _norm(cfg.width), Attention(cfg)
        self.mlp_norm, self.mlp = _norm(cfg.width), MLP(cfg)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.attn_norm(x))
        return x + self.mlp(self.mlp_norm(x))

    @torch.no_grad()
    def reset_parameters(self) -> None:
        residual = 1 / math.sqrt(2 * (self.layer + 1))
        for lin, scale in (
            (self.attn.qkv, 1.0),
            (self.attn.out, residual),
            (self.mlp.up, 1.0),
            (self.mlp.down, residual),
        ):
            fan_in = lin.in_features if self.init_fan_in else self.width
            _trunc_normal_(lin.weight, scale / math.sqrt(fan_in))
        for norm in (self.attn_norm, self.mlp_norm, self.attn.q_norm, self.attn.k_norm):
            norm.reset_parameters()


class LM(nn.Module):
    """Token ids (B, T) → logits (B, T, V). Initialized on construction from the global RNG; use
    ``build_lm(cfg, seed)`` for a seeded model that leaves the global RNG alone."""

    def __init__(self, cfg: LMConfig):
        super().__init__()
        self.cfg = cfg
        self.embed = nn.Embedding(cfg.vocab_size, cfg.width)
        self.blocks = nn.ModuleList(Block(cfg, i) for i in range(cfg.depth))
        self.norm = _norm(cfg.width)
        self.head = nn.Linear(cfg.width, cfg.vocab_size, bias=False)
        self.reset_parameters()

    @torch.no_grad()
    def reset_parameters(self) -> None:
        std = 1 / math.sqrt(self.cfg.width)
        _trunc_normal_(self.embed.weight, std)
        _trunc_normal_(self.head.weight, std)
        for block in self.blocks:
            block.reset_parameters()
        self.norm.reset_parameters()

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        x = self.embed(tokens)
        for block in self.blocks:
            x = block(x)
        return self.head(self.norm(x))


def build_lm(cfg: LMConfig, seed: int = 0) -> LM:
    """An ``LM`` initialized from ``seed`` (on CPU; move it afterwards). The global RNG is untouched."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return LM(cfg)


__all__ = ["LM", "Attention", "Block", "MLP", "RotaryEmbedding", "SwiGLU", "build_lm"]
