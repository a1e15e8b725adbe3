#!/usr/bin/env bash
# CIFAR-10 round 2 on one GPU (issue 16, item 8): the r2_gpu preset (patch 4, d_model 256, depth 6,
# 8 heads, 50 epochs, batch 256, augmentation, bf16 autocast), in two resumable stages:
#   1. lr sensitivity, 2 seeds, 20 epochs: A0 and QK-norm lr x4, A1 frame lr x5 (0.01 .. 1, the cap binds
#      from ~0.1)                                                    -> results/cifar/r2_gpu_lr.json
#   2. fitted baselines, 12 paired seeds, 50 epochs, all 50k images: A0, A1 at its best frame lr from
#      stage 1, A3 (frozen frames), QK-norm                          -> results/cifar/r2_gpu.json
# Re-running this script continues a stopped stage (finished runs are skipped).
#
# Time estimate (not measured: no GPU was available when this was written): ~1.9 GFLOP per image for
# forward + backward, 2.5M images per 50-epoch run = 4.7 PFLOP, ~1 min of bf16 compute on an H100/H200
# at 10% of peak; the step loop (9,800 steps, Python, StiefelAdam's batched polar factor, Q/K
# bookkeeping) adds ~10-20 ms a step, so 2-5 min per 50-epoch run. Stage 1: 28 runs x 20 epochs
# ~ 1-2 h; stage 2: 48 runs ~ 2-4 h. On a T4, ~10x longer. Time one run first:
#   python -m stiefel_mini.experiments.cifar --preset r2_gpu --arms A1 --seeds 0 --epochs 2 --out /tmp/t.json
#
# Usage: STIEFEL_MINI_CIFAR_DIR=/path/to/cifar10-jpeg bash results/cifar/gpu_round2.sh
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
PY=${PYTHON:-python3}
: "${STIEFEL_MINI_CIFAR_DIR:?set STIEFEL_MINI_CIFAR_DIR to the CIFAR-10 ImageFolder copy (or let torchvision download)}"
"$PY" -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else "no CUDA device")'

"$PY" -m stiefel_mini.experiments.cifar --preset r2_gpu --arms A0 A1 qknorm --seeds 0 1 --epochs 20 \
  --lrs 3e-4 1e-3 3e-3 1e-2 --frame_lrs 1e-2 3e-2 0.1 0.3 1.0 --out results/cifar/r2_gpu_lr.json

best() {  # best swept value of arm $1 in stage 1
  "$PY" -c '
import sys
from stiefel_mini.experiments import cifar
from stiefel_mini.experiments.records import load_results
runs = load_results("results/cifar/r2_gpu_lr.json")["runs"]
print(next(c["best"] for c in cifar.lr_curves(runs) if c["arm"] == sys.argv[1]))' "$1"
}
LR=${LR:-$(best A0)}            # the whole-model lr (A0's best; also the lr of A1's other weights, A3)
FRAME_LR=${FRAME_LR:-$(best A1)}
echo "stage 2: lr $LR, A1 frame lr $FRAME_LR (QK-norm runs at lr $LR too; its own best is in stage 1)"
"$PY" -m stiefel_mini.experiments.cifar --preset r2_gpu --lr "$LR" --frame_lr "$FRAME_LR" --out results/cifar/r2_gpu.json
