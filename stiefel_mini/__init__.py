"""stiefel_mini: Stiefel-constrained attention and a Riemannian Adam in plain PyTorch."""

__version__ = "0.1.0"
