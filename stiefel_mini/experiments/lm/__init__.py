"""A small language model on real text: Stiefel attention against AdamW and Muon, with paired seeds.

Its modules: configs and the study plan (:mod:`.config`), the corpus and tokenizer (:mod:`.data`),
the model and its optimizers (:mod:`.model`, :mod:`.attention`), the lr-sweep scheduler
(:mod:`.plan`), one run, the study and the command line (:mod:`.experiment`;
``python -m stiefel_mini.experiments.lm``), round 2 (:mod:`.round2`, :mod:`.round2_run`) and reading
the results files (:mod:`.results`).
"""
