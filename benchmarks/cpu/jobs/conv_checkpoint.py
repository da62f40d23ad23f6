"""A small CNN with BatchNorm and max-pooling, each block under activation checkpointing;
SGD with Nesterov momentum (for-loop path), gradients zeroed in place."""
import torch
import torch.nn as nn
from torch.utils.checkpoint import checkpoint

torch.manual_seed(0)


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Sequential(nn.Conv2d(3, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(),
                               nn.MaxPool2d(2))
        self.b = nn.Sequential(nn.Conv2d(32, 64, 3, padding=1), nn.BatchNorm2d(64), nn.ReLU(),
                               nn.AdaptiveAvgPool2d(1))
        self.fc = nn.Linear(64, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = checkpoint(self.a, x, use_reentrant=False)
        x = checkpoint(self.b, x, use_reentrant=False)
        return self.fc(x.flatten(1))


m = Net()
opt = torch.optim.SGD(m.parameters(), lr=0.1, momentum=0.9, nesterov=True, foreach=False)
for _ in range(20):
    x, y = torch.randn(16, 3, 32, 32), torch.randint(0, 10, (16,))
    loss = nn.functional.cross_entropy(m(x), y)
    opt.zero_grad(set_to_none=False)
    loss.backward()
    opt.step()
