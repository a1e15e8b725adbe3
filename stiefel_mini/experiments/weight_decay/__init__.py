"""Weight decay on the attention Q/K projections: AdamW against StiefelAdam on associative recall.

Its modules: the configs (:mod:`.config`), the task, model, run, sweep and command line
(:mod:`.experiment`; ``python -m stiefel_mini.experiments.weight_decay``), readouts of a stored
history (:mod:`.readouts`) and what decay does under the other libraries' orthogonal weights
(:mod:`.orthogonal_decay`).
"""
