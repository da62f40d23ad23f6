"""Two ranks started with torch.multiprocessing.spawn: DDP over gloo, ZeroRedundancyOptimizer
(AdamW), a DataLoader with two worker processes, gradient clipping. The port comes from
TRACESIM_JOB_PORT (default 29533)."""
import os

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn as nn
from torch.distributed.optim import ZeroRedundancyOptimizer
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, TensorDataset


def run(rank: int, world: int) -> None:
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = os.environ.get("TRACESIM_JOB_PORT", "29533")
    dist.init_process_group("gloo", rank=rank, world_size=world)
    torch.manual_seed(0)
    m = DDP(nn.Sequential(nn.Linear(128, 512), nn.ReLU(), nn.Linear(512, 128)))
    opt = ZeroRedundancyOptimizer(m.parameters(), optimizer_class=torch.optim.AdamW, lr=1e-3)
    ds = TensorDataset(torch.randn(2048, 128), torch.randn(2048, 128))
    dl = DataLoader(ds, batch_size=64, num_workers=2, persistent_workers=True)
    step = 0
    while step < 20:
        for x, y in dl:
            nn.functional.mse_loss(m(x), y).backward()
            torch.nn.utils.clip_grad_norm_(m.parameters(), 1.0)
            opt.step()
            opt.zero_grad()
            step += 1
            if step >= 20:
                break
    dist.destroy_process_group()


if __name__ == "__main__":
    mp.spawn(run, args=(2,), nprocs=2)
