"""A small language model on real text: Stiefel attention against AdamW and Muon, with paired seeds.

Its modules: the run config (:mod:`.config`), the corpus and tokenizer (:mod:`.data`), the model
(:mod:`.model`, :mod:`.attention`: QK-norm, the attention's largest logit and lowest entropy), one
run and the multi-process study (:mod:`.experiment`); the studies as data: the plan type and its
reading against the runs (:mod:`.plans`), the four declared studies (:mod:`.studies`), each arm's
model and optimizers by recipe (:mod:`.arms`), the one runner and the command line
(:mod:`.run_study`; ``python -m stiefel_mini.experiments.lm``); and reading the results files
(:mod:`.results`).
"""
