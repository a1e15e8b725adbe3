"""Grokking on modular arithmetic: Stiefel-constrained Q/K against AdamW, with paired seeds.

Its modules: configs and plans (:mod:`.config`), task and model (:mod:`.model`), metrics and run
selection (:mod:`.metrics`), the run, the sweep and the command line (:mod:`.experiment`;
``python -m stiefel_mini.experiments.grokking``), and two readings of stored runs: the one-run
design replayed (:mod:`.one_run`) and the curve beside Nanda et al.'s phases (:mod:`.peer_curve`).
"""
