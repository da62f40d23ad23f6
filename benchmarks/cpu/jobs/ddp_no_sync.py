"""DDP over gloo (run under torchrun) with 4 micro-batches of gradient accumulation, the
first three under no_sync(): one gradient all-reduce per optimizer step."""
import contextlib

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP

dist.init_process_group("gloo")
torch.manual_seed(0)
m = DDP(nn.Sequential(nn.Linear(256, 1024), nn.GELU(), nn.Linear(1024, 256)))
opt = torch.optim.SGD(m.parameters(), lr=0.01, momentum=0.9)
for _ in range(20):
    for micro in range(4):
        with m.no_sync() if micro < 3 else contextlib.nullcontext():
            m(torch.randn(32, 256)).pow(2).mean().backward()
    opt.step()
    opt.zero_grad()
dist.destroy_process_group()
