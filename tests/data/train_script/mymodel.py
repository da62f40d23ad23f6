"""A small model and a synthetic data set of this training script's own (tracesim knows
nothing about them): a one-block transformer-ish token model."""

from __future__ import annotations

import torch
from torch import nn
from torch.utils.data import Dataset


class Block(nn.Module):
    def __init__(self, width: int, heads: int) -> None:
        super().__init__()
        self.norm_a = nn.LayerNorm(width)
        self.mix = nn.MultiheadAttention(width, heads, batch_first=True)
        self.norm_b = nn.LayerNorm(width)
        self.ff = nn.Sequential(nn.Linear(width, 4 * width), nn.GELU(), nn.Linear(4 * width, width))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.norm_a(x)
        x = x + self.mix(h, h, h, need_weights=False)[0]
        return x + self.ff(self.norm_b(x))


class TinyTagger(nn.Module):
    """Tokens in, one class per token out."""

    def __init__(self, vocab: int = 64, width: int = 32, heads: int = 2, classes: int = 8) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, width)
        self.block = Block(width, heads)
        self.out = nn.Linear(width, classes)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.out(self.block(self.embed(tokens)))


class NoisyTokens(Dataset):
    """Random token sequences labelled by a fixed rule (token mod classes)."""

    def __init__(self, n: int = 256, seq: int = 16, vocab: int = 64, classes: int = 8) -> None:
        gen = torch.Generator().manual_seed(7)
        self.tokens = torch.randint(0, vocab, (n, seq), generator=gen)
        self.labels = self.tokens % classes

    def __len__(self) -> int:
        return len(self.tokens)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        return self.tokens[i], self.labels[i]
