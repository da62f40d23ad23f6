"""How benchmarks/published/mlperf_ddp.py reads a submission's Megatron-Core DDP settings: the
gradient NaN check from the printed config or pretrain.py with the Dockerfile's release, and
the bucket size from the printed config or conf/custom.yaml with the config's exports."""

from __future__ import annotations

import pytest

from benchmarks.published.mlperf_ddp import bucket_cell, nan_cells, syncs_of

DDP_LOG = ("DistributedDataParallelConfig(grad_reduce_in_fp32=False, overlap_grad_reduce=True, "
           "check_for_nan_in_grad={}, bucket_size=134217728, average_in_collective=True)")


def _files(**files: str):
    return lambda path: files.get(path.rsplit("/", 1)[1].replace(".", "_"), "")


@pytest.mark.parametrize(("minor", "syncs"), [(8, 1), (9, 1), (10, 0), (11, 0), (12, 2), (14, 2)])
def test_syncs_follow_the_megatron_core_release(minor: int, syncs: int) -> None:
    assert syncs_of(minor) == syncs


def test_the_printed_config_wins_and_the_dockerfile_gives_the_release() -> None:
    show = _files(pretrain_py="check_for_nan_in_grad=False,\n",
                  Dockerfile="ARG MCORE_REVISION=core_r0.11.0\n")
    assert nan_cells(show, "impl", DDP_LOG.format("True"), False) == ("true", "0")
    assert nan_cells(show, "impl", DDP_LOG.format("False"), False) == ("false", "")
    assert nan_cells(show, "impl", "no config printed", False) == ("false", "")


def test_pretrain_py_and_the_full_iteration_graph() -> None:
    show = _files(pretrain_py="  check_for_nan_in_grad=not config.model.full_cuda_graph,\n",
                  Dockerfile="ARG MCORE_REVISION=core_v0.13.1\n")
    assert nan_cells(show, "impl", "", full_graph=False) == ("true", "2")
    assert nan_cells(show, "impl", "", full_graph=True) == ("false", "")
    # no Megatron-Core DDP (Apex's distributed_fused_adam): no cells
    assert nan_cells(_files(), "impl", "", False) == ("", "")


def test_an_unknown_release_or_expression_stops_the_script() -> None:
    with pytest.raises(SystemExit, match="version unknown"):
        nan_cells(_files(pretrain_py="check_for_nan_in_grad=True,\n"), "impl", "", False)
    with pytest.raises(SystemExit, match="is not read"):
        nan_cells(_files(pretrain_py="check_for_nan_in_grad=cfg.check,\n"), "impl", "", False)


def test_the_bucket_size_from_the_log_else_custom_yaml() -> None:
    yaml = "  optim:\n    bucket_size: ${oc.decode:${oc.env:BUCKET_SIZE,134217728}}\n"
    assert bucket_cell(DDP_LOG.format("True"), [], {}) == "134217728"
    assert bucket_cell("", ["", yaml], {}) == "134217728"
    assert bucket_cell("", [yaml], {"BUCKET_SIZE": "768000000"}) == "768000000"
    assert bucket_cell("", [], {}) == ""
    with pytest.raises(SystemExit, match="parameter count"):
        bucket_cell("", ["    bucket_size: ${oc.env:BUCKET_SIZE,1e8}\n"], {})
