"""Decoder-only transformers built from a :class:`tracesim.specs.model.ModelSpec`.

Three families, small and readable rather than fast:

* ``gpt``: learned token and position embeddings, LayerNorm, fused ``qkv`` projection, GELU MLP
  (``fc1`` -> ``act`` -> ``fc2``), LM head tied to the token embedding (as the spec says).
* ``llama``: RMSNorm, rotary position embeddings, grouped-query attention (separate ``q``,
  ``k``, ``v`` projections, ``kv_heads`` key/value heads), SwiGLU MLP (``gate``, ``up``,
  ``down``), untied LM head unless the spec ties it.
* ``moe``: the llama block (or the gpt block when the spec says ``norm: layernorm`` /
  ``activation: gelu``) with the MLP of every ``moe_every``-th layer replaced by ``experts``
  routed experts, ``top_k`` per token (softmax router, renormalised top-k weights).

Module names are the contract with the extractor (see ``docs/collect.md``): block ``i`` is
``blocks.{i}`` with ``ln1``, ``attn`` (``qkv`` or ``q``/``k``/``v``, ``rope``, ``core``,
``proj``), ``ln2`` and ``mlp`` (``fc1``/``act``/``fc2``, or ``gate``/``up``/``act``/``down``,
or for MoE ``router`` and ``experts.{e}``); then ``norm_f``, ``head`` and ``loss``.
Attention uses :func:`torch.nn.functional.scaled_dot_product_attention` (causal).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from tracesim.specs.model import ModelSpec

#: torch dtype per spec dtype; fp8 training is not something a CPU collector can run
TORCH_DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}


class RMSNorm(nn.Module):
    """Root-mean-square norm over the last dimension, with a learned scale."""

    def __init__(self, dim: int, eps: float = 1e-5):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        rms = torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)
        return x * rms * self.weight


def _norm(spec: ModelSpec) -> nn.Module:
    return RMSNorm(spec.hidden) if spec.norm == "rmsnorm" else nn.LayerNorm(spec.hidden)


class Rotary(nn.Module):
    """Rotary position embedding applied to ``[batch, heads, seq, head_dim]`` tensors."""

    cos: torch.Tensor
    sin: torch.Tensor

    def __init__(self, head_dim: int, max_seq: int, base: float = 10000.0):
        super().__init__()
        inv = 1.0 / (base ** (torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim))
        ang = torch.outer(torch.arange(max_seq, dtype=torch.float32), inv)
        self.register_buffer("cos", ang.cos(), persistent=False)
        self.register_buffer("sin", ang.sin(), persistent=False)

    def forward(self, q: torch.Tensor, k: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        seq = q.shape[-2]
        cos = self.cos[:seq].to(q.dtype)
        sin = self.sin[:seq].to(q.dtype)
        return _rotate(q, cos, sin), _rotate(k, cos, sin)


def _rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    x1, x2 = x[..., 0::2], x[..., 1::2]
    return torch.stack((x1 * cos - x2 * sin, x1 * sin + x2 * cos), dim=-1).flatten(-2)


class AttentionCore(nn.Module):
    """Causal scaled-dot-product attention, kv heads repeated up to the query heads."""

    def __init__(self, heads: int, kv_heads: int):
        super().__init__()
        self.groups = heads // kv_heads

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        if self.groups > 1:
            k = k.repeat_interleave(self.groups, dim=1)
            v = v.repeat_interleave(self.groups, dim=1)
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)


class Attention(nn.Module):
    """Multi-head (gpt: fused qkv) or grouped-query (llama: q, k, v, rotary) attention."""

    def __init__(self, spec: ModelSpec, rotary: bool, fused_qkv: bool, bias: bool):
        super().__init__()
        self.heads, self.kv_heads, self.head_dim = spec.heads, spec.kv_heads, spec.head_dim
        kv_dim = spec.kv_heads * spec.head_dim
        self.fused = fused_qkv
        if fused_qkv:
            self.qkv = nn.Linear(spec.hidden, spec.hidden + 2 * kv_dim, bias=bias)
        else:
            self.q = nn.Linear(spec.hidden, spec.hidden, bias=bias)
            self.k = nn.Linear(spec.hidden, kv_dim, bias=bias)
            self.v = nn.Linear(spec.hidden, kv_dim, bias=bias)
        self.rope = Rotary(spec.head_dim, spec.seq_len) if rotary else None
        self.core = AttentionCore(spec.heads, spec.kv_heads)
        self.proj = nn.Linear(spec.hidden, spec.hidden, bias=bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, h = x.shape
        kv_dim = self.kv_heads * self.head_dim
        if self.fused:
            q, k, v = self.qkv(x).split((h, kv_dim, kv_dim), dim=-1)
        else:
            q, k, v = self.q(x), self.k(x), self.v(x)
        q = q.view(b, s, self.heads, self.head_dim).transpose(1, 2)
        k = k.view(b, s, self.kv_heads, self.head_dim).transpose(1, 2)
        v = v.view(b, s, self.kv_heads, self.head_dim).transpose(1, 2)
        if self.rope is not None:
            q, k = self.rope(q, k)
        y = self.core(q, k, v)
        return self.proj(y.transpose(1, 2).reshape(b, s, h))


class GeluMLP(nn.Module):
    """``fc1`` (hidden -> ffn), GELU, ``fc2`` (ffn -> hidden)."""

    def __init__(self, hidden: int, ffn: int, bias: bool = True):
        super().__init__()
        self.fc1 = nn.Linear(hidden, ffn, bias=bias)
        self.act = nn.GELU()
        self.fc2 = nn.Linear(ffn, hidden, bias=bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(self.act(self.fc1(x)))


class SwiGLU(nn.Module):
    """``down(act(gate(x)) * up(x))`` with SiLU as ``act``."""

    def __init__(self, hidden: int, ffn: int, bias: bool = False):
        super().__init__()
        self.gate = nn.Linear(hidden, ffn, bias=bias)
        self.up = nn.Linear(hidden, ffn, bias=bias)
        self.act = nn.SiLU()
        self.down = nn.Linear(ffn, hidden, bias=bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down(self.act(self.gate(x)) * self.up(x))


def _mlp(spec: ModelSpec, ffn: int, bias: bool) -> nn.Module:
    return SwiGLU(spec.hidden, ffn, bias) if spec.activation == "swiglu" else GeluMLP(spec.hidden, ffn, bias)


class MoE(nn.Module):
    """Top-k routed experts: ``router`` (hidden -> experts), then ``experts.{e}`` MLPs.

    Each token goes to its ``top_k`` experts, weighted by the renormalised router softmax.
    Tokens are gathered per expert (data-dependent sizes, as in a real MoE layer).
    """

    def __init__(self, spec: ModelSpec, bias: bool):
        super().__init__()
        self.top_k = spec.top_k
        ffn = spec.moe_ffn_hidden or spec.ffn_hidden
        self.router = nn.Linear(spec.hidden, spec.experts, bias=False)
        self.experts = nn.ModuleList(_mlp(spec, ffn, bias) for _ in range(spec.experts))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, h = x.shape
        flat = x.reshape(b * s, h)
        probs = self.router(flat).softmax(dim=-1)
        weight, chosen = probs.topk(self.top_k, dim=-1)
        weight = weight / weight.sum(dim=-1, keepdim=True)
        out = torch.zeros_like(flat)
        for e, expert in enumerate(self.experts):
            token, slot = torch.nonzero(chosen == e, as_tuple=True)
            if token.numel() == 0:
                continue
            y = expert(flat.index_select(0, token)) * weight[token, slot].unsqueeze(-1)
            out = out.index_add(0, token, y)
        return out.view(b, s, h)


class Block(nn.Module):
    """Pre-norm transformer block: ``x + attn(ln1(x))``, then ``x + mlp(ln2(x))``."""

    def __init__(self, spec: ModelSpec, layer: int):
        super().__init__()
        llama_like = spec.norm == "rmsnorm"
        bias = not llama_like
        self.ln1 = _norm(spec)
        self.attn = Attention(spec, rotary=llama_like, fused_qkv=not llama_like, bias=bias)
        self.ln2 = _norm(spec)
        self.mlp = MoE(spec, bias) if spec.moe_layer(layer) else _mlp(spec, spec.ffn_hidden, bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class Embedding(nn.Module):
    """Token embedding ``tok`` plus, without rotary, a learned position embedding ``pos``."""

    def __init__(self, spec: ModelSpec, learned_positions: bool):
        super().__init__()
        self.tok = nn.Embedding(spec.vocab, spec.hidden)
        self.pos = nn.Embedding(spec.seq_len, spec.hidden) if learned_positions else None

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        x = self.tok(tokens)
        if self.pos is not None:
            x = x + self.pos(torch.arange(tokens.shape[1], device=tokens.device))
        return x


class Transformer(nn.Module):
    """Decoder-only LM: ``embed``, ``blocks``, ``norm_f``, ``head``, ``loss`` (cross-entropy).

    ``forward(tokens, targets)`` takes int64 ``[batch, seq]`` tensors and returns the mean
    next-token loss (a 0-d tensor).
    """

    def __init__(self, spec: ModelSpec):
        super().__init__()
        if spec.dtype not in TORCH_DTYPES:
            raise ValueError(f"dtype {spec.dtype!r} cannot be trained by the collector")
        self.spec = spec
        learned_positions = spec.norm != "rmsnorm"
        self.embed = Embedding(spec, learned_positions)
        self.blocks = nn.ModuleList(Block(spec, i) for i in range(spec.layers))
        self.norm_f = _norm(spec)
        self.head = nn.Linear(spec.hidden, spec.vocab, bias=False)
        if spec.tied_embeddings:
            self.head.weight = self.embed.tok.weight
        self.loss = nn.CrossEntropyLoss()
        self._init_weights()

    def _init_weights(self) -> None:
        """Normal(0, 0.02) weights (output projections scaled by 1/sqrt(2 layers)), zero biases."""
        gen = torch.Generator().manual_seed(1234)
        out_proj = ("proj.weight", "fc2.weight", "down.weight")
        with torch.no_grad():
            for name, p in self.named_parameters():
                if p.dim() >= 2:
                    std = 0.02 / math.sqrt(2 * self.spec.layers) if name.endswith(out_proj) else 0.02
                    p.normal_(0.0, std, generator=gen)
                elif name.endswith("bias"):
                    p.zero_()

    def forward(self, tokens: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        x = self.embed(tokens)
        for block in self.blocks:
            x = block(x)
        logits = self.head(self.norm_f(x))
        return self.loss(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))


def build_model(spec: ModelSpec, device: str = "cpu") -> Transformer:
    """Build the model for ``spec`` on ``device`` in the spec's dtype (seeded, deterministic)."""
    model = Transformer(spec)
    return model.to(device=device, dtype=TORCH_DTYPES[spec.dtype])
