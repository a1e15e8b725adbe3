"""``python -m stiefel_mini.experiments.cifar``: the CIFAR-10 benchmark's command line, :func:`.experiment.main`."""

from stiefel_mini.experiments.cifar.experiment import main
from stiefel_mini.experiments.runner import cli

if __name__ == "__main__":
    cli(main)
