"""The CIFAR-10 patch benchmark: does constraining Q/K to the Stiefel manifold help a small ViT, and why?

Its modules: the run config and its plans (:mod:`.config`), the data (:mod:`.data`), one run
(:mod:`.train`), reading sweep files (:mod:`.results`) and the sweep with its command line
(:mod:`.experiment`; ``python -m stiefel_mini.experiments.cifar``).
"""
