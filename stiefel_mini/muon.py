r"""StiefelMuon: manifold Muon for frames, Muon for hidden matrices, AdamW for the rest, in one optimizer.

:func:`muon_update` is the matrix rule (Newton-Schulz orthogonalisation per block, with the
per-head split of a projection), :func:`~stiefel_mini.manifold_muon.manifold_muon_update` the
frame rule; :class:`StiefelMuon` sorts parameters into the three roles, keeps the state and calls
them. :func:`mark_adamw_params` marks a model's embeddings and output head, which Muon should not
train (``convert_attention`` calls it).
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any, Callable, Iterable

import torch
from torch import Tensor, nn

from . import _distributed as _dt
from ._adamw import adamw_step
from ._checks import check_frame_tensor
from .groups import is_frame
from .manifold_muon import manifold_muon_update, polar_gram

__all__ = ["StiefelMuon", "muon_update", "zeropower_via_newtonschulz", "mark_adamw_params", "ROLES"]

ROLES = ("frame", "muon", "adamw")
"""The roles, each trained by its own rule (``"frame"`` by manifold Muon, ``"muon"`` by Muon, ``"adamw"`` by AdamW)."""

_ROLE = "_stiefel_role"  # the mark mark_adamw_params sets on a tensor
_ADJUST = (None, "original", "match_rms_adamw", "spectral_unclamped")
NS_COEFFICIENTS = (3.4445, -4.7750, 2.0315)


def mark_adamw_params(model: nn.Module) -> int:
    """Mark the weights of ``model``'s embeddings and output head for AdamW; returns how many.

    ``nn.Embedding`` weights, and the output head that Hugging Face's ``get_output_embeddings()`` or
    timm's ``get_classifier()`` returns: their rows are looked up or read out one class at a time,
    so the Muon recipe trains them with AdamW. :class:`StiefelMuon` reads the mark in any group.
    """
    heads = []
    for getter in ("get_output_embeddings", "get_classifier"):
        head = getattr(model, getter, None)
        head = head() if callable(head) else None
        if isinstance(head, nn.Module):
            heads.append(head)
    marked = {id(m.weight): m.weight for m in [*model.modules(), *heads]
              if (isinstance(m, nn.Embedding) or m in heads) and isinstance(getattr(m, "weight", None), Tensor)}
    for w in marked.values():
        setattr(w, _ROLE, "adamw")
    return len(marked)


def zeropower_via_newtonschulz(G: Tensor, steps: int = 5, eps: float = 1e-7) -> Tensor:
    """About ``U V^T`` of ``G = U S V^T`` for a batch ``(..., r, c)``: Muon's quintic iteration.

    ``X <- a X + (b A + c A^2) X``, ``A = X X^T``, from ``X = G / ||G||_F`` on the wide orientation,
    with ``(a, b, c) = (3.4445, -4.7750, 2.0315)``: every singular value lands in about [0.7, 1.2]
    in five steps. Runs in float32 at least (bf16 is what GPUs use; on a CPU it is slower).

    Shapes: ``(..., r, c)`` -> ``(..., r, c)``. Reference: Jordan et al. (2024), "Muon".
    """
    a, b, c = NS_COEFFICIENTS
    tall = G.shape[-2] > G.shape[-1]
    X = (G.mT if tall else G).to(torch.promote_types(G.dtype, torch.float32))  # (..., min, max)
    X = X / torch.linalg.matrix_norm(X, keepdim=True).clamp_min(eps)
    for _ in range(steps):
        A = X @ X.mT  # (..., min, min)
        X = a * X + (b * A + c * A @ A) @ X
    return (X.mT if tall else X).to(G.dtype)


def _adjusted(lr: float, fn: str | None, fan_out: int, fan_in: int) -> float:
    """torch.optim.Muon's lr scale for a ``(fan_out, fan_in)`` matrix."""
    if fn in (None, "original"):
        return lr * max(1.0, fan_out / fan_in) ** 0.5
    if fn == "match_rms_adamw":
        return lr * 0.2 * max(fan_out, fan_in) ** 0.5
    return lr * (fan_out / fan_in) ** 0.5


def muon_update(G: Tensor, lr: float, *, heads: int | None = None, fused: int = 1, in_out: bool = False,
                adjust_lr_fn: str | None = None, ns_steps: int = 5) -> Tensor:
    r"""Muon's step ``-lr' NS(G)`` for a weight, orthogonalised per matrix or per head block.

    .. math::
        \Delta = -\,\gamma\, \alpha(f_\text{out}, f_\text{in})\, \mathrm{NS}_5(G_b) \quad \text{for each block } G_b

    with ``gamma = lr`` and ``alpha`` the shape factor of ``adjust_lr_fn`` (torch.optim.Muon's:
    ``None``/``"original"`` ``sqrt(max(1, f_out / f_in))``, ``"match_rms_adamw"`` ``0.2 sqrt(max(f_out,
    f_in))``, ``"spectral_unclamped"`` ``sqrt(f_out / f_in)``). Blocks: a 2-D ``G`` is one matrix,
    ``(f_out, f_in)`` (``in_out=True``: stored ``(f_in, f_out)``, GPT-2's ``Conv1D``); a tensor with
    more dimensions a batch of them. ``heads=h`` splits a 2-D projection's output dimension into
    ``fused * h`` blocks laid out ``[projection][head][head_dim]`` (a fused Q|K|V is ``fused=3``;
    ``heads=1, fused=3`` orthogonalises Q, K and V each whole, the Muon recipe).

    Shapes: ``G`` ``(..., r, c)`` -> the step shaped as ``G``.
    Reference: Jordan et al. (2024), "Muon"; per-head Muon as in DeepSpeed #8367.
    """
    X = G.mT if in_out else G  # (..., f_out, f_in)
    if heads is not None:
        blocks = fused * heads
        if G.dim() != 2 or X.shape[0] % blocks:
            raise ValueError(f"heads={heads}, fused={fused} splits the output dimension of a 2-D weight into "
                             f"{blocks} equal blocks; got a weight of shape {tuple(G.shape)} (in_out={in_out})")
        X = X.reshape(blocks, X.shape[0] // blocks, X.shape[1])  # (blocks, d_head, f_in)
    f_out, f_in = X.shape[-2:]
    O = zeropower_via_newtonschulz(X, ns_steps).mul_(-_adjusted(lr, adjust_lr_fn, f_out, f_in))
    if heads is not None:
        O = O.reshape(-1, f_in)  # (f_out, f_in)
    return O.mT if in_out else O


class StiefelMuon(torch.optim.Optimizer):
    r"""Manifold Muon on the frames, Muon on the other hidden matrices, AdamW on the rest.

    Every parameter has a role. **Frames** (marked by this library's modules, or every parameter
    of a group with ``stiefel=True``) take manifold Muon: with momentum buffer ``B`` and Nesterov
    direction ``U_t = G_t + mu (mu B_{t-1} + G_t)`` (as torch.optim.Muon, in its lerp form),

    .. math::
        A_t = \arg\min_{\lVert A \rVert_2 \le \eta_f,\ W_t^\top A + A^\top W_t = 0} \langle U_t, A \rangle,
        \qquad W_{t+1} = \operatorname{polar}(W_t + A_t)

    (:func:`~stiefel_mini.manifold_muon.manifold_muon_update`, warm-started from the previous
    step's multiplier, kept as ``state["multiplier"]``). ``eta_f = frame_lr`` is the spectral
    length of a frame's step, the largest angle (in radians, to first order) by which a direction
    of the frame turns. **Muon** matrices (every other parameter of 2 or more dimensions) take
    ``W <- (1 - lr wd) W + muon_update(U_t)`` (:func:`muon_update`); **AdamW** parameters (vectors,
    scalars, the embeddings and output head :func:`mark_adamw_params` marked, or a group with
    ``role="adamw"``) take ``torch.optim.AdamW``'s step at ``adamw_lr``. Frames are never decayed
    (decay is a no-op on the manifold).

    Each group given is split into one group per role it holds, each with its own ``lr`` (the
    role's: ``frame_lr``, ``lr``, ``adamw_lr``) and a ``role`` key, so LR schedulers scale every
    role (one that cycles momentum, ``OneCycleLR`` or ``CyclicLR``, cycles ``betas[0]``, AdamW's, as
    on ``torch.optim.AdamW``, and leaves Muon's ``momentum`` fixed). ``StiefelMuon(model.parameters())``
    on a model that ``convert_attention`` converted (or that :func:`mark_adamw_params` marked) gives
    each parameter the right role. A gradient that is not finite raises ``ValueError`` naming the
    parameter before anything changes (the same rule for every role), on every rank of a device
    mesh; a tensor its role cannot step (a vector given ``role="muon"``, a weight that ``heads`` does
    not split evenly) raises ``ValueError`` when its group is added, and no group of that call is added.

    Args:
        params: parameters or groups; a group may set any option below.
        lr: Muon's learning rate (before ``adjust_lr_fn``'s shape factor). Default ``0.02``.
        momentum, nesterov: Muon's momentum (frames and matrices). Defaults ``0.95``, ``True``.
        weight_decay: decoupled decay of Muon matrices. Default ``0``.
        frame_lr: spectral step length of the frames. Default: ``lr``.
        adamw_lr, betas, eps, adamw_weight_decay: AdamW's, for the AdamW role (decay default:
            ``weight_decay``). Defaults ``3e-4``, ``(0.9, 0.95)``, ``1e-8``.
        adjust_lr_fn, ns_steps: as ``torch.optim.Muon``'s.
        heads, fused, in_out: the Muon block layout (:func:`muon_update`).
        stiefel: every parameter of the group is a frame. role: force one role on a group's
            unmarked parameters (``"muon"`` or ``"adamw"``; a frame stays a frame).
        tol, max_iter: the frame rule's tangency tolerance and iteration cap.

    Reference: Jordan et al. (2024), "Muon"; Bernstein (2025), "Modular Manifolds"; Loshchilov &
    Hutter (2019), AdamW.
    """

    def __init__(self, params: Iterable[Tensor] | Iterable[dict[str, Any]], lr: float = 0.02,
                 momentum: float = 0.95, weight_decay: float = 0.0, *, nesterov: bool = True,
                 frame_lr: float | None = None, adamw_lr: float = 3e-4, betas: tuple[float, float] = (0.9, 0.95),
                 eps: float = 1e-8, adamw_weight_decay: float | None = None, adjust_lr_fn: str | None = None,
                 ns_steps: int = 5, heads: int | None = None, fused: int = 1, in_out: bool = False,
                 stiefel: bool = False, role: str | None = None, tol: float = 1e-3, max_iter: int = 20) -> None:
        defaults = dict(lr=lr, momentum=momentum, weight_decay=weight_decay, nesterov=nesterov, frame_lr=frame_lr,
                        adamw_lr=adamw_lr, betas=betas, eps=eps, adamw_weight_decay=adamw_weight_decay,
                        adjust_lr_fn=adjust_lr_fn, ns_steps=ns_steps, heads=heads, fused=fused, in_out=in_out,
                        stiefel=stiefel, role=role, tol=tol, max_iter=max_iter)
        _check_options(defaults)
        super().__init__(params, defaults)

    def add_param_group(self, param_group: dict[str, Any]) -> None:
        """Check a group and add it as one group per role its parameters hold, each with its role's ``lr``."""
        known = set(self.defaults) | {"params", "param_names", "initial_lr", "name"}
        unknown = sorted(set(param_group) - known)
        if unknown:
            raise ValueError(f"unknown param group key(s) {unknown}; known keys: {sorted(known)}")
        params = param_group["params"]
        params = [params] if isinstance(params, Tensor) else list(params)
        merged = {**self.defaults, **param_group}
        _check_options(merged)
        by_role: dict[str, list] = defaultdict(list)
        for p in params:  # every tensor is checked before any group is added
            t = p[1] if isinstance(p, tuple) else p
            role = _role_of(t, merged)
            if role == "frame":
                check_frame_tensor(t)
            elif role == "muon":
                _check_muon_tensor(t, merged)
            by_role[role].append(p)
        for r in ROLES:
            if not by_role.get(r):
                continue
            lr = {"frame": merged["frame_lr"] if merged["frame_lr"] is not None else merged["lr"],
                  "muon": merged["lr"], "adamw": merged["adamw_lr"]}[r]
            super().add_param_group({**param_group, "params": by_role[r], "role": r, "lr": lr})

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Load state as ``torch.optim.Optimizer`` does, keeping each frame's ``multiplier`` in float64
        (``Optimizer.load_state_dict`` would cast it to the frame's dtype)."""
        super().load_state_dict(state_dict)
        for own, saved in zip(self.param_groups, state_dict["param_groups"]):
            for p, pid in zip(own["params"], saved["params"]):
                m = state_dict["state"].get(pid, {}).get("multiplier")
                if m is not None:
                    self.state[p]["multiplier"] = m.to(dtype=torch.float64, device=p.device, copy=True)

    @torch.no_grad()
    def step(self, closure: Callable[[], float] | None = None) -> float | None:
        """One step of every role; ``closure`` re-evaluates the model and returns the loss.

        Every gradient is checked first (one host synchronisation): a non-finite one raises
        ``ValueError`` naming the parameter, and nothing changes.
        """
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        live = [(i, j, p) for i, g in enumerate(self.param_groups) for j, p in enumerate(g["params"])
                if p.grad is not None]
        mesh = _dt.mesh_of([p for _, _, p in live])
        finite = [torch.isfinite(_dt.local(p.grad)).all() for _, _, p in live]
        if finite and not _dt.all_true(torch.stack(finite).all(), mesh):
            bad = next(((i, j, p) for (i, j, p), ok in zip(live, finite) if not bool(ok)), None)
            where = (f"parameter {bad[1]} of param group {bad[0]} (role {self.param_groups[bad[0]]['role']!r}), "
                     f"of shape {tuple(bad[2].shape)}," if bad else "a parameter on another rank")
            raise ValueError(f"StiefelMuon: the gradient of {where} is not finite (NaN or inf); no parameter or "
                             "state was changed. Lower the learning rate, clip gradients, or skip the step")
        for group in self.param_groups:
            {"frame": self._frame_step, "muon": self._muon_step, "adamw": self._adamw_step}[group["role"]](group)
        return loss

    def _direction(self, p: Tensor, group: dict[str, Any]) -> Tensor:
        """The Nesterov momentum direction of ``p`` (torch.optim.Muon's lerp form), its buffer updated."""
        g = _dt.local(p.grad)
        state = self.state[p]
        if "momentum_buffer" not in state:
            state["momentum_buffer"] = torch.zeros_like(p.grad)
        buf = _dt.local(state["momentum_buffer"])
        buf.lerp_(g, 1 - group["momentum"])
        return g.lerp(buf, group["momentum"]) if group["nesterov"] else buf

    def _muon_step(self, group: dict[str, Any]) -> None:
        for p in group["params"]:
            if p.grad is None:
                continue
            if _dt.is_dtensor(p) and any(not pl.is_replicate() and getattr(pl, "dim", 0) % p.dim() >= p.dim() - 2
                                         for pl in p.placements):
                raise ValueError(
                    f"StiefelMuon: a Muon matrix of shape {tuple(p.shape)} is sharded across ranks "
                    f"({tuple(p.placements)}); Muon orthogonalises whole matrices. Give it role='adamw', keep "
                    "it out of the sharding (fully_shard(..., ignored_params=...)), or gather it")
            U = self._direction(p, group)
            w = _dt.local(p)
            w.mul_(1 - group["lr"] * group["weight_decay"])
            w.add_(muon_update(U, group["lr"], heads=group["heads"], fused=group["fused"], in_out=group["in_out"],
                               adjust_lr_fn=group["adjust_lr_fn"], ns_steps=group["ns_steps"]))

    def _frame_step(self, group: dict[str, Any]) -> None:
        # Frames of one shape are stacked so that the multiplier's iteration runs once per bucket.
        buckets: dict[tuple, list[Tensor]] = defaultdict(list)
        for p in group["params"]:
            if p.grad is not None and _dt.local(p).numel():
                buckets[(tuple(_dt.local(p).shape), p.dtype, p.device)].append(p)
        for ps in buckets.values():
            U = torch.stack([self._direction(p, group) for p in ps])  # (k, ..., r, c)
            W = torch.stack([_dt.local(p) for p in ps])
            lead = W.shape[:-2]
            r, c = W.shape[-2:]
            mult = [self.state[p].get("multiplier") for p in ps]
            m = torch.stack([_dt.local(x) for x in mult]).reshape(-1, min(r, c), min(r, c)) \
                if all(x is not None for x in mult) else None
            A, m_new, _ = manifold_muon_update(W.reshape(-1, r, c), U.reshape(-1, r, c), group["lr"],
                                                multiplier=m, tol=group["tol"], max_iter=group["max_iter"])
            W_new = polar_gram(W.reshape(-1, r, c) + A).reshape(W.shape)
            m_new = m_new.reshape(*lead, min(r, c), min(r, c))
            for k, p in enumerate(ps):
                _dt.local(p).copy_(W_new[k])
                shape = (*p.shape[:-2], min(r, c), min(r, c))
                self.state[p]["multiplier"] = _dt.like(m_new[k].clone(), p, shape)

    def _adamw_step(self, group: dict[str, Any]) -> None:
        wd = group["adamw_weight_decay"] if group["adamw_weight_decay"] is not None else group["weight_decay"]
        adamw_step(group["params"], self.state, lr=group["lr"], betas=group["betas"], eps=group["eps"],
                   weight_decay=wd, owner="StiefelMuon")


def _role_of(p: Tensor, group: dict[str, Any]) -> str:
    """The role of ``p`` in ``group``: a frame stays a frame; then the group's ``role``, the mark, the shape."""
    if group["stiefel"] or is_frame(p):
        return "frame"
    if group["role"] is not None:
        return group["role"]
    return getattr(p, _ROLE, None) or ("muon" if p.dim() >= 2 else "adamw")


def _check_muon_tensor(p: Tensor, group: dict[str, Any]) -> None:
    """``ValueError`` for a tensor Muon cannot step: fewer than 2 dimensions, or a head split
    (``heads``, ``fused``, ``in_out``) that does not cut it into equal blocks; checked when the group is added."""
    if p.dim() < 2:
        raise ValueError(f"StiefelMuon: role='muon' needs a matrix, got a tensor of shape {tuple(p.shape)}; "
                         "give vectors and scalars role='adamw' (or leave role unset)")
    if group["heads"] is not None:
        blocks = group["fused"] * group["heads"]
        f_out = p.shape[-1] if group["in_out"] else p.shape[0]
        if p.dim() != 2 or f_out % blocks:
            raise ValueError(f"StiefelMuon: heads={group['heads']}, fused={group['fused']} splits the output "
                             f"dimension of a 2-D weight into {blocks} equal blocks; this group holds a weight of "
                             f"shape {tuple(p.shape)} (in_out={group['in_out']}). Put the Q/K/V projections in a "
                             "group of their own with heads set, and the other matrices in one without")


def _check_options(g: dict[str, Any]) -> None:
    """``ValueError`` for an option no role can use, naming it and what it takes."""
    def bad(name, want):
        raise ValueError(f"StiefelMuon: {name}={g[name]!r} is invalid; {want}")
    for name in ("lr", "adamw_lr", "weight_decay"):
        if not (isinstance(g[name], (int, float)) and g[name] >= 0):
            bad(name, "it must be a number >= 0")
    for name, other in (("frame_lr", "lr"), ("adamw_weight_decay", "weight_decay")):
        if g[name] is not None and not (isinstance(g[name], (int, float)) and g[name] >= 0):
            bad(name, f"it must be a number >= 0 (or None: {other})")
    if not (isinstance(g["eps"], (int, float)) and g["eps"] >= 0):
        bad("eps", "AdamW's epsilon, a number >= 0")
    if not 0 <= g["momentum"] < 1:
        bad("momentum", "it must be in [0, 1)")
    if not all(0 <= b < 1 for b in g["betas"]) or len(g["betas"]) != 2:
        bad("betas", "two numbers in [0, 1)")
    if g["adjust_lr_fn"] not in _ADJUST:
        bad("adjust_lr_fn", f"choose one of {list(_ADJUST)}")
    if g["role"] not in (None, *ROLES):
        bad("role", f"choose one of {list(ROLES)} or None (the role from the mark and the shape)")
    if g["heads"] is not None and not (isinstance(g["heads"], int) and g["heads"] >= 1):
        bad("heads", "a number of heads >= 1, or None")
    if not (isinstance(g["fused"], int) and g["fused"] >= 1):
        bad("fused", "the number of projections fused in one weight (Q|K|V: 3), >= 1")
    if not (isinstance(g["ns_steps"], int) and 1 <= g["ns_steps"] < 100):
        bad("ns_steps", "an integer in 1..99")
    if not g["tol"] > 0 or not (isinstance(g["max_iter"], int) and g["max_iter"] >= 0):
        bad("tol" if not g["tol"] > 0 else "max_iter", "tol > 0 and an integer max_iter >= 0")
