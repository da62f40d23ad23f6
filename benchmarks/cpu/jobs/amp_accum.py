"""Mixed precision on the CPU: bf16 autocast, a GradScaler, 4 micro-batches of gradient
accumulation, gradient clipping, two parameter groups and a OneCycle schedule."""
import torch
import torch.nn as nn

torch.manual_seed(0)
m = nn.Sequential(nn.Linear(256, 1024), nn.GELU(), nn.Linear(1024, 256), nn.LayerNorm(256),
                  nn.Linear(256, 10))
rest = [p for k, p in m.named_parameters() if not k.startswith("0.")]
opt = torch.optim.AdamW([{"params": m[0].parameters(), "lr": 1e-3},
                         {"params": rest, "lr": 3e-4, "weight_decay": 0.0}])
sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=[1e-3, 3e-4], total_steps=100)
scaler = torch.amp.GradScaler("cpu")
for _ in range(20):
    for _ in range(4):
        x, y = torch.randn(32, 256), torch.randint(0, 10, (32,))
        with torch.autocast("cpu", dtype=torch.bfloat16):
            loss = nn.functional.cross_entropy(m(x), y) / 4
        scaler.scale(loss).backward()
    scaler.unscale_(opt)
    torch.nn.utils.clip_grad_norm_(m.parameters(), 1.0)
    scaler.step(opt)
    scaler.update()
    sched.step()
    opt.zero_grad(set_to_none=True)
