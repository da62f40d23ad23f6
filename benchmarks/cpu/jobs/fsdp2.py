"""FSDP2 (fully_shard per layer and at the root) over gloo, run under torchrun."""
import torch
import torch.distributed as dist
import torch.nn as nn
from torch.distributed.fsdp import fully_shard

dist.init_process_group("gloo")
torch.manual_seed(0)
m = nn.Sequential(*[nn.Sequential(nn.Linear(256, 256), nn.ReLU()) for _ in range(4)])
for layer in m:
    fully_shard(layer)
fully_shard(m)
opt = torch.optim.AdamW(m.parameters(), lr=1e-3)
for _ in range(20):
    m(torch.randn(32, 256)).pow(2).mean().backward()
    opt.step()
    opt.zero_grad()
dist.destroy_process_group()
