#!/usr/bin/env bash
# The prepared GPU check: the optimizer-step table at widths 256, 512, 1024 in float32
# and bf16 (with the 10,000-step float32 drift table), and the end-to-end training throughput.
# Run from the repository root on a CUDA machine: bash benchmarks/gpu.sh | tee benchmarks/gpu_results.txt
# The step tables are also written, with every round's time and the run's provenance, to
# results/benchmarks/optimizer_step_cuda_{float32,bfloat16}.json.
set -euo pipefail
python benchmarks/optimizer_step.py --device cuda --widths 256 512 1024 --dtype float32 --drift-steps 10000 \
  --out results/benchmarks/optimizer_step_cuda_float32.json
python benchmarks/optimizer_step.py --device cuda --widths 256 512 1024 --dtype bfloat16 --drift-steps 0 \
  --out results/benchmarks/optimizer_step_cuda_bfloat16.json
python benchmarks/throughput.py --preset gpu
