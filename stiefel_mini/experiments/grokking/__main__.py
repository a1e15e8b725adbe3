"""``python -m stiefel_mini.experiments.grokking``: the grokking experiment's command line, :func:`.experiment.main`."""

from stiefel_mini.experiments.grokking.experiment import main
from stiefel_mini.experiments.runner import cli

if __name__ == "__main__":
    cli(main)
