"""L-BFGS: the optimizer evaluates a closure (forward and backward) several times per step."""
import torch
import torch.nn as nn

torch.manual_seed(0)
m = nn.Linear(100, 1)
opt = torch.optim.LBFGS(m.parameters(), max_iter=4)
X, Y = torch.randn(512, 100), torch.randn(512, 1)


def closure() -> torch.Tensor:
    opt.zero_grad()
    loss = ((m(X) - Y) ** 2).mean()
    loss.backward()
    return loss


for _ in range(20):
    opt.step(closure)
