"""``python -m stiefel_mini.experiments.lm``: the language-model study's command line, :func:`.experiment.main`."""

from stiefel_mini.experiments.lm.experiment import main
from stiefel_mini.experiments.runner import cli

if __name__ == "__main__":
    cli(main)
