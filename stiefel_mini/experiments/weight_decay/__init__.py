"""Weight decay on the attention Q/K projections: AdamW against StiefelAdam on associative recall.

Its modules: the configs (:mod:`.config`), the task, model, run, sweep and command line
(:mod:`.experiment`; ``python -m stiefel_mini.experiments.weight_decay``), readouts of a stored
history (:mod:`.readouts`) and what decay does under the other libraries' orthogonal weights
(:mod:`.orthogonal_decay`). The package names what the chapters use.
"""

from stiefel_mini.experiments.weight_decay.experiment import sweep
from stiefel_mini.experiments.weight_decay.readouts import (equilibrium_angle, frames_identical, max_change,
                                                            summary_table)

__all__ = ["equilibrium_angle", "frames_identical", "max_change", "summary_table", "sweep"]
