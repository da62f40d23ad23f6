#!/usr/bin/env bash
# The main job end to end on the embedded default: set up .venv (reused when present),
# collect profiled training steps of the tiny GPT on this CPU, check the replay against the
# measured step time, retarget the recording to a GPT-3 1.7B model on one DGX H100 node
# (result and plots in runs/demo-h100/), and replay the recorded job itself on an H100.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
TS=.venv/bin/tracesim
mkdir -p runs
echo "== 1/4 collect gpt-tiny on the CPU (torch.profiler + execution trace) -> runs/demo-bundle" >&2
$TS collect --workload gpt-tiny -o runs/demo-bundle
echo "== 2/4 self-replay: predicted vs measured step time" >&2
$TS validate self-replay runs/demo-bundle
echo "== 3/4 replay on a stored cluster: gpt3-1.7b, 8 x H100 (topologies/h100x8.yaml), DP 8" >&2
$TS replay runs/demo-bundle --model gpt3-1.7b --cluster topologies/h100x8.yaml --dp 8 \
  --micro-batch 4 --global-batch 64 -o runs/demo-h100
echo "== 4/4 the recording itself on one H100: its kernels moved onto the GPU by the cost model" >&2
$TS replay runs/demo-bundle --retarget trace --device h100
