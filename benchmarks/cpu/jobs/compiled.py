"""torch.compile on the CPU (inductor's C++ kernels; the GEMMs stay aten::mm / addmm)."""
import torch
import torch.nn as nn

torch.manual_seed(0)


class Block(nn.Module):
    def __init__(self, d: int = 128) -> None:
        super().__init__()
        self.ln = nn.LayerNorm(d)
        self.attn = nn.MultiheadAttention(d, 4, batch_first=True)
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.ln(x)
        x = x + self.attn(h, h, h, need_weights=False)[0]
        return x + self.mlp(self.ln(x))


m = nn.Sequential(Block(), Block())
cm = torch.compile(m)
opt = torch.optim.Adam(m.parameters(), lr=1e-3)
for _ in range(20):
    loss = cm(torch.randn(8, 64, 128)).pow(2).mean()
    loss.backward()
    opt.step()
    opt.zero_grad()
