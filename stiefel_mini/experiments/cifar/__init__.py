"""The CIFAR-10 patch benchmark: does constraining Q/K to the Stiefel manifold help a small ViT, and why?

Its modules: the run config and its plans (:mod:`.config`), the data (:mod:`.data`), one run
(:mod:`.train`), reading sweep files (:mod:`.results`) and the sweep with its command line
(:mod:`.experiment`; ``python -m stiefel_mini.experiments.cifar``). The package names what the
chapters use.
"""

from stiefel_mini.experiments.cifar.config import ALL_ARMS, PLANS
from stiefel_mini.experiments.cifar.results import (STUDY_NAMES, direction, lead_text, load_studies, study_plan,
                                                    study_status, summary_table)
from stiefel_mini.experiments.cifar.train import run

__all__ = ["ALL_ARMS", "PLANS", "STUDY_NAMES", "direction", "lead_text", "load_studies", "run", "study_plan",
           "study_status", "summary_table"]
