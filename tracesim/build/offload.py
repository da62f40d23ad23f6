"""Activation offloading to host memory: what the GPU waits for the copies.

Transformer Engine's CPU offload (``get_cpu_offload_context``; Megatron-Core's
``cpu_offloading`` with ``cpu_offloading_num_layers`` N, activations only, which Megatron
allows with one pipeline stage and no recomputation) copies the tensors the first ``N``
transformer layers save for their backward pass to pinned host memory on a separate stream
after their forward, and copies them back before their backward. Its synchronisation
(Transformer Engine 2.9, ``AsyncDoubleBufferGroupOffloadHandler``) spreads the ``N``
offloaded layers over the ``L`` layers by a window map, ``w_k = floor(L / N) (k + 1) - 1``
plus the remainder ``L mod N`` spread over the first windows (:func:`windows`):

* forward: layer 0's copy starts when its forward ends; at the end of layer ``w_k`` the
  compute stream waits for copy ``k`` (and the copy stream for the compute), then copy
  ``k + 1`` starts;
* backward: at the start of layer ``w_k``'s backward the compute stream waits for the
  reload under way (``k + 1``'s), then the reload of layer ``k`` starts; layer 0's backward
  waits for every reload.

A copy moves the layer's saved activations (``act_bytes``, the memory estimate's per-layer
bytes) at the cluster's ``host_link`` rate (device to host, host to device; achieved per GPU
with every GPU of the node copying). The builder walks a pass's layers with their compute
times in program order and adds each wait to the compute task that waits
(:func:`forward_waits`, :func:`backward_waits`), as it does for the host's launch waits;
communication inside the pass counts as zero time there, which can only overstate the
waits. Not modelled: the HBM bandwidth the copies take from the compute beside them (a
C2C copy at ~180 GB/s is ~2% of a Blackwell GPU's HBM bandwidth).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from tracesim.build.units import Unit


@dataclass(frozen=True)
class Offload:
    """``layers`` = N offloaded layers (0 .. N-1) of a model of ``num_layers``;
    ``act_bytes[k]``: layer ``k``'s saved activations per micro-batch; rates in GB/s."""

    layers: int
    num_layers: int
    act_bytes: tuple[float, ...]
    d2h_GBps: float
    h2d_GBps: float

    def d2h_ns(self, k: int) -> float:
        return self.act_bytes[k] / self.d2h_GBps

    def h2d_ns(self, k: int) -> float:
        return self.act_bytes[k] / self.h2d_GBps


def windows(num_layers: int, n: int) -> list[int]:
    """Transformer Engine's ``layer_window_map``: the layer at whose end (forward) or start
    (backward) offloaded group ``k`` is synchronised, for ``n`` < ``num_layers`` groups."""
    out, constant = [], 0
    for i in range(n):
        w = (num_layers // n) * (i + 1) - 1
        if i < num_layers % n:
            w += i + 1
            constant = i + 1
        else:
            w += constant
        out.append(w)
    return out


def forward_waits(off: Offload, ends: Sequence[float]) -> dict[int, float]:
    """Waits (ns) at the end of each synchronising layer of a forward pass whose layer ``l``
    ends at ``ends[l]`` (ns from the pass's start, no waits): layer -> wait."""
    win = windows(off.num_layers, off.layers)
    shift = 0.0
    done = ends[0] + off.d2h_ns(0)  # copy 0 starts when layer 0's forward ends
    waits: dict[int, float] = {}
    for k, w in enumerate(win):
        now = ends[w] + shift
        wait = max(0.0, done - now)
        if wait > 0:
            waits[w] = wait
            shift += wait
        if k + 1 < off.layers:
            done = max(now + wait, ends[k + 1] + shift) + off.d2h_ns(k + 1)
    return waits


def backward_waits(off: Offload, starts: Sequence[float]) -> dict[int, float]:
    """Waits (ns) at the start of layers' backward in a backward pass whose layer ``l``
    starts at ``starts[l]`` (ns from the pass's start, no waits): layer -> wait."""
    win = windows(off.num_layers, off.layers)
    shift = 0.0
    done = float("-inf")  # the reload under way ends
    waits: dict[int, float] = {}

    def wait_at(layer: int) -> float:
        nonlocal shift
        now = starts[layer] + shift
        wait = max(0.0, done - now)
        if wait > 0:
            waits[layer] = waits.get(layer, 0.0) + wait
            shift += wait
        return now + wait

    for k in range(off.layers - 1, -1, -1):
        t = wait_at(win[k])
        done = t + off.h2d_ns(k)
    wait_at(0)
    return waits


def add_waits(off: Offload, u: Unit, phase: str, first: dict[int, int]) -> float:
    """Add the GPU's waits for the copies to the compute task of ``u`` (a pass of the only
    model chunk) that waits: the last of a layer in the forward, the first of a layer in the
    backward (``first``: each layer's first compute task there). Returns the total (ns)."""
    c = u.cols
    at, t = [], 0.0  # compute time before each task, in program order
    for i in range(len(u)):
        at.append(t)
        if c["lane"][i] == "compute":
            t += c["dur_ns"][i]
    layers = range(off.num_layers)
    if phase == "fwd":
        idx = {lay: u.layer_end[lay] for lay in layers}
        waits = forward_waits(off, [at[idx[lay]] + c["dur_ns"][idx[lay]] for lay in layers])
    else:
        idx = {lay: first[lay] for lay in layers}
        waits = backward_waits(off, [at[idx[lay]] for lay in layers])
    for lay, w in waits.items():
        c["dur_ns"][idx[lay]] += int(round(w))
    return sum(waits.values())
