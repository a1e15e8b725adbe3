"""``python -m stiefel_mini.experiments.lm``: the language-model studies' command line, :func:`.run_study.main`."""

from stiefel_mini.experiments.lm.run_study import main
from stiefel_mini.experiments.runner import cli

if __name__ == "__main__":
    cli(main)
