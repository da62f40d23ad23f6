"""A TorchScript (torch.jit.script) model trained with Adam."""
import torch
import torch.nn as nn

torch.manual_seed(0)


class M(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a, self.b = nn.Linear(256, 512), nn.Linear(512, 256)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.b(torch.relu(self.a(x)))


m = torch.jit.script(M())
opt = torch.optim.Adam(m.parameters())
for _ in range(20):
    m(torch.randn(64, 256)).sum().backward()
    opt.step()
    opt.zero_grad()
