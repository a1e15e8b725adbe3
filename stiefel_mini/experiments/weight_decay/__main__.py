"""``python -m stiefel_mini.experiments.weight_decay``: the weight-decay sweep, :func:`.experiment.main`."""

from stiefel_mini.experiments.runner import cli
from stiefel_mini.experiments.weight_decay.experiment import main

if __name__ == "__main__":
    cli(main)
