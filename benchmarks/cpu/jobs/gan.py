"""Two models, two optimizers (a GAN): the discriminator's optimizer steps first."""
import torch
import torch.nn as nn

torch.manual_seed(0)
G = nn.Sequential(nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 784), nn.Tanh())
D = nn.Sequential(nn.Linear(784, 256), nn.LeakyReLU(0.2), nn.Linear(256, 1))
og = torch.optim.Adam(G.parameters(), 2e-4, betas=(0.5, 0.999))
od = torch.optim.Adam(D.parameters(), 2e-4, betas=(0.5, 0.999))
bce = nn.BCEWithLogitsLoss()
for _ in range(20):
    real, z = torch.randn(64, 784), torch.randn(64, 64)
    fake = G(z)
    ld = bce(D(real), torch.ones(64, 1)) + bce(D(fake.detach()), torch.zeros(64, 1))
    od.zero_grad()
    ld.backward()
    od.step()
    lg = bce(D(fake), torch.ones(64, 1))
    og.zero_grad()
    lg.backward()
    og.step()
