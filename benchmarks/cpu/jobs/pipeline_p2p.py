"""Two pipeline stages over gloo (run under torchrun): blocking send / recv of activations
forward and of their gradients backward, SGD on each stage."""
import torch
import torch.distributed as dist
import torch.nn as nn

dist.init_process_group("gloo")
rank = dist.get_rank()
torch.manual_seed(rank)
stage = nn.Sequential(nn.Linear(256, 512), nn.ReLU(), nn.Linear(512, 256))
opt = torch.optim.SGD(stage.parameters(), lr=0.01)
for _ in range(20):
    if rank == 0:
        y = stage(torch.randn(32, 256))
        dist.send(y.detach(), 1)
        g = torch.empty_like(y)
        dist.recv(g, 1)
        y.backward(g)
    else:
        x = torch.empty(32, 256)
        dist.recv(x, 0)
        x.requires_grad_()
        stage(x).pow(2).mean().backward()
        dist.send(x.grad, 0)
    opt.step()
    opt.zero_grad()
dist.destroy_process_group()
