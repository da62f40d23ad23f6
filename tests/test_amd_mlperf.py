"""AMD's MLPerf Training v5.1 Llama 3.1 8B on one node of 8 MI355X (docs/accuracy.md, "Another
published run: AMD's MLPerf Llama 3.1 8B on 8 MI355X"): the documented replay and its error.
Nothing in tracesim was set from the run; this guards the documented number."""

from __future__ import annotations

import pytest

from tracesim.options import ReplayOptions
from tracesim.pipeline.run import predict

#: median of the 11 runs' logged throughput (samples/s), mlcommons/training_results_v5.1
#: AMD/results/MI355X_EPYC_9575F_pytorch/llama31_8b, x 8,192 tokens / 8 GPUs
PUBLISHED_TOKENS_PER_GPU = 30.683 * 8192 / 8
RUN = dict(model="llama3-8b", cluster="mi355x-platform", tp=1, pp=1, dp=8, micro_batch=2,
           global_batch=32, seq_len=8192, dtype="fp8", fp8_recipe="delayed",
           fp8_param_gather=True, zero=1, dp_overlap=False, overlap_param_gather=False)


def test_the_documented_replay_of_amds_mi355x_run():
    res = predict(None, ReplayOptions.from_mapping(RUN, "test", "run"))
    assert res.device == "mi355x" and res.gpus == 8
    err = res.tokens_per_s / 8 / PUBLISHED_TOKENS_PER_GPU - 1
    assert err == pytest.approx(0.072, abs=0.01)  # docs/accuracy.md: +7.2%
    assert res.breakdown["exposed_comm_s"]["dp"] > 0.03  # no overlap: the mesh's RS / AG show
