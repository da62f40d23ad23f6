"""A first or last model chunk without transformer layers (the embedding alone, the output
layer and loss alone): Megatron-Core's split when the embedding and the loss count as one
layer each and ``layers + 2`` is one per chunk (Llama 3.1 405B on pp 16 x vp 8)."""

from __future__ import annotations

import pytest

from tracesim.engine.replay import replay
from tracesim.errors import InputError
from tracesim.options import ReplayOptions
from tracesim.pipeline.published import pipeline_split

from .helpers import build
from .test_builder import GPT

LLAMA = GPT.replace(layers=6)


def test_pipeline_split_leaves_the_embedding_and_the_loss_alone_when_exact() -> None:
    assert pipeline_split(126, 16, 8) == (0,) + (1,) * 126 + (0,)
    # not exact: as before (no bare chunk), or no split at all
    assert pipeline_split(126, 8, 8) == (1,) + (2,) * 62 + (1,)
    assert pipeline_split(127, 16, 8) is None and pipeline_split(125, 16, 8) is None
    assert pipeline_split(61, 16, 2) == (2,) * 29 + (1,) * 3


def test_bare_first_and_last_chunk_place_no_layer_there() -> None:
    # 6 layers on pp 2 x vpp 2: chunks (rank 0, rank 1, rank 0, rank 1) = 0, 3, 3, 0
    b = build(LLAMA, pp=2, vpp=2, schedule="interleaved", global_batch=4, stage_layers=(0, 3, 3, 0))
    t = b.graph.tasks
    layers = t[t["layer"] >= 0].groupby("rank")["layer"].unique()
    assert sorted(layers[0]) == [3, 4, 5] and sorted(layers[1]) == [0, 1, 2]
    # the embedding still runs on rank 0 and the loss on rank 1
    names = {r: set(map(str, v)) for r, v in t.groupby("rank", observed=True)["name"].unique().items()}
    assert "embed.tok" in names[0] and "embed.tok" not in names[1]
    assert {"head", "loss"} <= names[1] and not {"head", "loss"} & names[0]
    r = replay(b.graph)
    assert r.end_ns.max() > 0
    # the same layers, one moved into each end chunk: the same work, a different order
    bb = build(LLAMA, pp=2, vpp=2, schedule="interleaved", global_batch=4,
               stage_layers=(1, 2, 2, 1))
    gpu = t["kind"] == "gpu"
    assert gpu.sum() == (bb.graph.tasks["kind"] == "gpu").sum()


@pytest.mark.parametrize("split, pp, vpp", [((1, 0, 3, 2), 2, 2), ((0, 6), 2, 1),
                                            ((0, 3, 3), 3, 2)])
def test_a_bare_chunk_anywhere_else_is_a_layout_error(split: tuple[int, ...], pp: int,
                                                      vpp: int) -> None:
    # a middle chunk; a list of two entries; with pp entries and vpp 2 a bare stage leaves
    # its later chunk (a middle one) bare too
    with pytest.raises(InputError) as e:
        build(LLAMA, pp=pp, vpp=vpp, schedule="interleaved" if vpp > 1 else "1f1b",
              global_batch=4 * pp, stage_layers=split)
    assert "layer" in str(e.value)


def test_a_bare_first_stage_without_interleaving() -> None:
    b = build(LLAMA, pp=3, global_batch=6, stage_layers=(0, 3, 3))
    t = b.graph.tasks
    assert (t[t["rank"] == 0]["layer"] < 0).all()
    assert replay(b.graph).end_ns.max() > 0


def test_stage_layers_option_takes_zero() -> None:
    o = ReplayOptions.from_mapping({"stage_layers": "0,3,3,0"}, "cfg.yaml", "replay")
    assert o.stage_layers == (0, 3, 3, 0)
    with pytest.raises(InputError) as e:
        ReplayOptions.from_mapping({"stage_layers": "-1,3"}, "cfg.yaml", "replay")
    assert "cfg.yaml: replay.stage_layers" in str(e.value)  # the file and key it came from


def test_the_26_02_table_reads_and_lays_out_its_405b_row_with_bare_ends() -> None:
    from pathlib import Path

    from tracesim.pipeline.published import bridge_options, read_table

    path = Path(__file__).resolve().parents[1] / "benchmarks" / "published" / "megatron_bridge_26_02.csv"
    fmt, rows = read_table(path)
    assert fmt == "bridge" and len(rows) == 33
    k, row = next((i, r) for i, r in enumerate(rows) if r["system"] == "DGX-GB200"
                  and r["model"] == "llama3.1-405b" and r["precision"] == "fp8-mx")
    opts = bridge_options(row, path, k)
    assert opts["vpp"] == 8 and opts["stage_layers"] == (0,) + (1,) * 126 + (0,)
    # every row's ga agrees with its batch and layout
    for r in rows:
        dp = int(r["gpus"]) // (int(r["tp"]) * int(r["pp"]) * int(r["cp"]))
        assert int(r["ga"]) * int(r["mbs"]) * dp == int(r["gbs"])
