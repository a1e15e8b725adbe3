"""stiefel_mini: Stiefel-constrained attention and a Riemannian Adam in plain PyTorch.

>>> from stiefel_mini import StiefelAdam, StiefelSelfAttention, param_groups
"""

from .attention import QKNormSelfAttention, StiefelSelfAttention, make_attention
from .geometry import (
    RETRACTIONS,
    canonical_gradient,
    orthogonality_error,
    project,
    project_tangent,
    random_stiefel,
    retract,
)
from .convert import convert_attention
from .groups import frame_parameters, is_frame, mark_frame, param_groups, qk_parameters
from .mha import StiefelMultiheadAttention
from .optim import StiefelAdam, stiefel_adam_frame_update
from .manifold_muon import manifold_muon_update
from .muon import StiefelMuon, mark_muon_roles, muon_update

__version__ = "0.1.0"

__all__ = [
    "StiefelAdam",
    "stiefel_adam_frame_update",
    "StiefelMuon",
    "manifold_muon_update",
    "muon_update",
    "mark_muon_roles",
    "StiefelSelfAttention",
    "QKNormSelfAttention",
    "make_attention",
    "StiefelMultiheadAttention",
    "convert_attention",
    "param_groups",
    "frame_parameters",
    "qk_parameters",
    "is_frame",
    "mark_frame",
    "RETRACTIONS",
    "retract",
    "project",
    "project_tangent",
    "canonical_gradient",
    "random_stiefel",
    "orthogonality_error",
]
