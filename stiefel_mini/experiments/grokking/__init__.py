"""Grokking on modular arithmetic: Stiefel-constrained Q/K against AdamW, with paired seeds.

Its modules: configs and plans (:mod:`.config`), task and model (:mod:`.model`), metrics and run
selection (:mod:`.metrics`), the run, the sweep and the command line (:mod:`.experiment`;
``python -m stiefel_mini.experiments.grokking``), and two readings of stored runs: the one-run
design replayed (:mod:`.one_run`) and the curve beside Nanda et al.'s phases (:mod:`.peer_curve`).
The package names what the chapters use.
"""

from stiefel_mini.experiments.grokking.config import PLANS, STUDY_NAMES, SWEEPS
from stiefel_mini.experiments.grokking.experiment import load_study, run
from stiefel_mini.experiments.grokking.metrics import drops, runs_by_arm, seed_runs, stored_metrics
from stiefel_mini.experiments.grokking.model import GrokkingTransformer, match_logit_scale

__all__ = ["GrokkingTransformer", "PLANS", "STUDY_NAMES", "SWEEPS", "drops", "load_study", "match_logit_scale", "run",
           "runs_by_arm", "seed_runs", "stored_metrics"]
