"""A plain PyTorch training script that knows nothing about tracesim (the test job of
tests/test_collect_command.py): AdamW, a DataLoader, DDP over gloo under torchrun.

    python train.py --steps 20
    torchrun --standalone --nproc-per-node 2 train.py --steps 20

Flags for the failure tests: ``--crash-after N`` raises after N steps, ``--no-optim``
updates the weights by hand (no torch.optim).
"""

from __future__ import annotations

import argparse
import os
import sys

import torch
import torch.distributed as dist
from mymodel import NoisyTokens, TinyTagger
from torch.utils.data import DataLoader, DistributedSampler


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--workers", type=int, default=0, help="DataLoader worker processes")
    p.add_argument("--crash-after", type=int, default=None)
    p.add_argument("--no-optim", action="store_true")
    args = p.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(0)
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world > 1:
        dist.init_process_group("gloo")
    model: torch.nn.Module = TinyTagger()
    if world > 1:
        model = torch.nn.parallel.DistributedDataParallel(model)
    data = NoisyTokens()
    sampler = DistributedSampler(data) if world > 1 else None
    loader = DataLoader(data, batch_size=args.batch, sampler=sampler, shuffle=sampler is None,
                        num_workers=args.workers, drop_last=True,
                        multiprocessing_context="spawn" if args.workers else None,
                        persistent_workers=args.workers > 0)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    loss_fn = torch.nn.CrossEntropyLoss()
    step = 0
    while step < args.steps:
        for tokens, labels in loader:
            if args.crash_after is not None and step == args.crash_after:
                raise RuntimeError(f"boom at step {step}")
            logits = model(tokens)
            loss = loss_fn(logits.flatten(0, 1), labels.flatten())
            loss.backward()
            if args.no_optim:
                with torch.no_grad():
                    for w in model.parameters():
                        w -= 1e-3 * w.grad
                        w.grad = None
            else:
                opt.step()
                opt.zero_grad(set_to_none=True)
            step += 1
            if step >= args.steps:
                break
    print(f"trained {step} steps, last loss {loss.item():.3f}")
    if world > 1:
        dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
