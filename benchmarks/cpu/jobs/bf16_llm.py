"""A tiny decoder-only LM written by hand: parameters in bf16, RMSNorm in fp32, SDPA causal
attention, SwiGLU, an fp32 loss, fused AdamW."""
import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(0)


class RMSNorm(nn.Module):
    def __init__(self, d: int) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.ones(d))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        f = x.float()
        return self.w * (f * torch.rsqrt(f.pow(2).mean(-1, keepdim=True) + 1e-6)).to(x.dtype)


class Block(nn.Module):
    def __init__(self, d: int = 256, h: int = 4) -> None:
        super().__init__()
        self.h = h
        self.n1, self.n2 = RMSNorm(d), RMSNorm(d)
        self.qkv, self.o = nn.Linear(d, 3 * d, bias=False), nn.Linear(d, d, bias=False)
        self.g, self.u = nn.Linear(d, 4 * d, bias=False), nn.Linear(d, 4 * d, bias=False)
        self.dn = nn.Linear(4 * d, d, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, T, D = x.shape
        q, k, v = self.qkv(self.n1(x)).view(B, T, 3, self.h, D // self.h).unbind(2)
        a = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2),
                                           v.transpose(1, 2), is_causal=True)
        x = x + self.o(a.transpose(1, 2).reshape(B, T, D))
        y = self.n2(x)
        return x + self.dn(F.silu(self.g(y)) * self.u(y))


class LM(nn.Module):
    def __init__(self, V: int = 2000, d: int = 256, L: int = 2) -> None:
        super().__init__()
        self.e = nn.Embedding(V, d)
        self.b = nn.ModuleList(Block(d) for _ in range(L))
        self.n = RMSNorm(d)
        self.head = nn.Linear(d, V, bias=False)

    def forward(self, t: torch.Tensor) -> torch.Tensor:
        x = self.e(t)
        for b in self.b:
            x = b(x)
        return self.head(self.n(x))


m = LM().to(torch.bfloat16)
opt = torch.optim.AdamW(m.parameters(), lr=3e-4, fused=True)
for _ in range(20):
    t = torch.randint(0, 2000, (4, 128))
    logits = m(t[:, :-1])
    loss = F.cross_entropy(logits.float().reshape(-1, 2000), t[:, 1:].reshape(-1))
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
