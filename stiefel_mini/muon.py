r"""StiefelMuon: manifold Muon for frames, Muon for hidden matrices, AdamW for the rest, in one optimizer.

:func:`muon_update` is the matrix rule (Newton-Schulz orthogonalisation per block, with the
per-head split of a projection), :func:`~stiefel_mini.manifold_muon.manifold_muon_update` the
frame rule; :class:`StiefelMuon` gives every parameter a role, keeps the state and calls them.
:func:`mark_muon_roles` reads the roles off a model as the Muon recipe assigns them
(``convert_attention`` calls it); :meth:`StiefelMuon.role_table` prints them.
"""

from __future__ import annotations

from typing import Any, Callable, Iterable

import torch
from torch import Tensor, nn

from . import _distributed as _dt
from ._adamw import adamw_step
from ._checks import check_frame_tensor
from ._muon_checks import ROLES, check_muon_tensor, check_options, parameter_label
from ._muon_roles import Role, group_role, mark, marked, model_roles, muon_layout, rule_text, warn_guesses
from .manifold_muon import manifold_muon_update, polar_gram

__all__ = ["StiefelMuon", "muon_update", "zeropower_via_newtonschulz", "newton_schulz_dtype", "mark_muon_roles",
           "ROLES"]

NS_COEFFICIENTS = (3.4445, -4.7750, 2.0315)
_LR_KEY = {"frame": "frame_lr", "muon": "lr", "adamw": "adamw_lr"}


def mark_muon_roles(model: nn.Module) -> dict[str, Role]:
    """Mark every parameter of ``model`` with the role the Muon recipe gives it; returns them by name.

    Muon for the hidden matrices (GPT-2's ``Conv1D`` read as stored, ``(in, out)``; conv filters
    flattened to ``(out, in * k...)``), AdamW for embeddings of every kind (token, position, patch,
    class tokens), output heads (the model's ``get_output_embeddings`` / ``get_classifier``, modules
    named ``lm_head``, ``classifier``, ``head``, ``score``, ``pooler``...; when the model names none,
    the last layer whose output is the vocabulary or the class count, a guess), gains, biases and
    learned logit scales, and manifold Muon for frames (read off the model by ``_muon_roles.model_roles``).
    :class:`StiefelMuon` reads the marks in any group; ``convert_attention`` calls this.
    """
    roles = model_roles(model)
    for name, (p, role) in roles.items():
        mark(p, Role(role.role, role.kind, role.layout, role.why, role.guessed, name))
    return {name: role for name, (_, role) in roles.items()}


def newton_schulz_dtype(device: torch.device | str) -> torch.dtype:
    """The precision of Newton-Schulz that is fastest and accurate enough on ``device``: bfloat16 on a
    GPU that computes it natively (CUDA compute capability 8.0+) and on a CPU with native bfloat16
    dot products (AVX512-BF16 or AMX), float32 elsewhere: without native support bfloat16 products are
    emulated (on an AVX2 CPU measured 75x slower than float32 for a 768 x 768 product)."""
    device = torch.device(device)
    if device.type == "cuda":
        return torch.bfloat16 if torch.cuda.is_bf16_supported(including_emulation=False) else torch.float32
    if device.type == "cpu":
        native = [getattr(torch.cpu, f, lambda: False) for f in ("_is_avx512_bf16_supported", "_is_amx_tile_supported")]
        return torch.bfloat16 if any(f() for f in native) else torch.float32
    return torch.float32


def zeropower_via_newtonschulz(G: Tensor, steps: int = 5, eps: float = 1e-7, dtype: torch.dtype | None = None) -> Tensor:
    """About ``U V^T`` of ``G = U S V^T`` for a batch ``(..., r, c)``: Muon's quintic iteration.

    ``X <- a X + (b A + c A^2) X``, ``A = X X^T``, from ``X = G / ||G||_F`` on the wide orientation,
    with ``(a, b, c) = (3.4445, -4.7750, 2.0315)``: every singular value lands in about [0.7, 1.2]
    in five steps. Runs in ``dtype`` (default: float32, or ``G``'s dtype if wider); bfloat16, as
    ``torch.optim.Muon`` runs it, is faster where the device computes it natively
    (:func:`newton_schulz_dtype`) and leaves the singular values in the same band.

    Shapes: ``(..., r, c)`` -> ``(..., r, c)``. Reference: Jordan et al. (2024), "Muon".
    """
    a, b, c = NS_COEFFICIENTS
    tall = G.shape[-2] > G.shape[-1]
    X = (G.mT if tall else G).to(dtype or torch.promote_types(G.dtype, torch.float32))  # (..., min, max)
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


def muon_update(G: Tensor, lr: float, *, heads: int | None = None, projections: int = 1, in_out: bool = False,
                flatten: bool = False, adjust_lr_fn: str | None = None, ns_steps: int = 5,
                ns_dtype: torch.dtype | None = None) -> Tensor:
    r"""Muon's step ``-lr' NS(G)`` for a weight, orthogonalised per matrix or per head block.

    .. math::
        \Delta = -\,\gamma\, \alpha(f_\text{out}, f_\text{in})\, \mathrm{NS}_5(G_b) \quad \text{for each block } G_b

    with ``gamma = lr`` and ``alpha`` the shape factor of ``adjust_lr_fn`` (torch.optim.Muon's:
    ``None``/``"original"`` ``sqrt(max(1, f_out / f_in))``, ``"match_rms_adamw"`` ``0.2 sqrt(max(f_out,
    f_in))``, ``"spectral_unclamped"`` ``sqrt(f_out / f_in)``). Blocks: a 2-D ``G`` is one matrix,
    ``(f_out, f_in)`` (``in_out=True``: stored ``(f_in, f_out)``, GPT-2's ``Conv1D``); with
    ``flatten=True`` a filter ``(out, in, k...)`` is one matrix ``(out, in * k...)`` (the Muon recipe
    for convolutions); otherwise a tensor with more dimensions is a batch of matrices. ``heads=h``
    splits a 2-D projection's output dimension into ``projections * h`` blocks laid out
    ``[projection][head][head_dim]`` (a fused Q|K|V is ``projections=3``; ``heads=1, projections=3``
    orthogonalises Q, K and V each whole). ``ns_dtype``: the precision of Newton-Schulz.

    Shapes: ``G`` ``(..., r, c)`` -> the step shaped as ``G``.
    Reference: Jordan et al. (2024), "Muon"; per-head Muon as in DeepSpeed #8367.
    """
    if flatten:
        if in_out or heads is not None:
            raise ValueError("muon_update: flatten=True reads the weight as (out, in * k...); in_out and heads "
                             "do not apply to it")
        return muon_update(G.reshape(G.shape[0], -1), lr, adjust_lr_fn=adjust_lr_fn, ns_steps=ns_steps,
                           ns_dtype=ns_dtype).reshape(G.shape)
    X = G.mT if in_out else G  # (..., f_out, f_in)
    if heads is not None:
        blocks = projections * heads
        if G.dim() != 2 or X.shape[0] % blocks:
            raise ValueError(f"heads={heads}, projections={projections} splits the output dimension of a 2-D "
                             f"weight into {blocks} equal blocks; got a weight of shape {tuple(G.shape)} (in_out={in_out})")
        X = X.reshape(blocks, X.shape[0] // blocks, X.shape[1])  # (blocks, d_head, f_in)
    f_out, f_in = X.shape[-2:]
    O = zeropower_via_newtonschulz(X, ns_steps, dtype=ns_dtype).mul_(-_adjusted(lr, adjust_lr_fn, f_out, f_in))
    if heads is not None:
        O = O.reshape(-1, f_in)  # (f_out, f_in)
    return O.mT if in_out else O


class StiefelMuon(torch.optim.Optimizer):
    r"""Manifold Muon on the frames, Muon on the other hidden matrices, AdamW on the rest.

    Every parameter has a role, as the Muon recipe assigns them. **Frames** (marked by this
    library's modules, or every parameter of a group with ``stiefel=True``) take manifold Muon: with
    momentum buffer ``B`` and Nesterov direction ``U_t = G_t + mu (mu B_{t-1} + G_t)`` (as
    torch.optim.Muon, in its lerp form),

    .. math::
        A_t = \arg\min_{\lVert A \rVert_2 \le \eta_f,\ W_t^\top A + A^\top W_t = 0} \langle U_t, A \rangle,
        \qquad W_{t+1} = \operatorname{polar}(W_t + A_t)

    (:func:`~stiefel_mini.manifold_muon.manifold_muon_update`, warm-started from the previous
    step's multiplier, kept as ``state["multiplier"]``). ``eta_f = frame_lr`` is the spectral
    length of a frame's step, the largest angle (in radians, to first order) by which a direction
    of the frame turns. **Muon** matrices (hidden matrices; conv filters flattened to ``(out, in *
    k...)``; GPT-2's ``Conv1D`` and a transposed ``FrameProjection`` read as stored, ``(in, out)``)
    take ``W <- (1 - lr wd) W + muon_update(U_t)`` (:func:`muon_update`). **AdamW** parameters
    (embeddings of every kind, output heads, gains, biases, learned logit scales, every vector) take
    ``torch.optim.AdamW``'s step. A parameter's role comes from, in order: ``stiefel=True`` or the
    frame mark; its group's ``role``; the mark of :func:`mark_muon_roles` (``convert_attention``
    sets it: it reads module types, names and shapes off the model); its name (when the optimizer is
    given ``model.named_parameters()``); its shape (vectors AdamW, the rest Muon). A role that is a
    guess (an output head found by its shape, a matrix known only by its shape) is named in one
    ``UserWarning`` per call, with the way to set it; :meth:`role_table` prints every role.

    **Groups and learning rates, as in torch.** Each group given is one param group
    (``opt.param_groups`` has as many as were passed, so a scheduler's per-group list counts them).
    A group's own ``lr`` is the lr of every parameter in it (``frame_lr`` and ``adamw_lr`` in the
    same group win over it for their roles); a group that sets no ``lr`` gives each role the
    optimizer's: ``lr`` (Muon), ``frame_lr`` (frames; default ``lr``), ``adamw_lr`` (AdamW). The
    group's ``lr`` is then its lead role's (Muon's, else the frames', else AdamW's), and a scheduler
    that moves it moves every role of the group in proportion, so ``OneCycleLR(opt, max_lr=0.02)``
    peaks every role at its own lr. Weight decay (``weight_decay``; AdamW's ``adamw_weight_decay``,
    default ``weight_decay``) decays Muon matrices, embeddings and heads; gains, biases, scales and
    other vectors only where their group sets its own decay (or ``decay_vectors=True``); frames
    never (decay is a no-op on the manifold). A group's own ``betas`` and ``eps`` are AdamW's.

    A gradient that is not finite raises ``ValueError`` naming the parameter (by name when names
    were given) before anything changes, on every rank of a device mesh; a sparse gradient raises
    too. A tensor its role cannot step raises ``ValueError`` when its group is added.

    **The Muon recipe** (the README's section "The Muon recipe" has it for GPT-2, Llama, a ViT and a
    classifier fine-tune; the lrs are those the language-model studies chose)::

        convert_attention(model, logit_scale="learned", scale_start="unit")  # frames; every role marked
        opt = StiefelMuon(param_groups(model), lr=0.01, frame_lr=0.02, adamw_lr=2e-3, weight_decay=0.1)
        print(opt.role_table())  # check the roles before training; the "scale" group has its own lr

    ``param_groups`` gives the learned logit scales a group ``"scale"`` (lr ``DEFAULT_SCALE_LR``, no
    decay), which this optimizer trains with AdamW at that lr; any parameter of a group named
    ``"scale"`` is trained so.

    Args:
        params: parameters, ``(name, parameter)`` pairs, or groups; a group may set any option below.
        lr: Muon's learning rate (before ``adjust_lr_fn``'s shape factor). Default ``0.02``.
        momentum, nesterov: Muon's momentum (frames and matrices). Defaults ``0.95``, ``True``.
        weight_decay: decoupled decay (above). Default ``0``.
        frame_lr: spectral step length of the frames. Default: ``lr``.
        adamw_lr, betas, eps, adamw_weight_decay: AdamW's. Defaults ``3e-4``, ``(0.9, 0.95)``, ``1e-8``,
            ``weight_decay``.
        decay_vectors: decay gains, biases and scales too; default: where the group sets its own decay.
        adjust_lr_fn, ns_steps: as ``torch.optim.Muon``'s.
        ns_dtype: Newton-Schulz's precision: ``"auto"`` (:func:`newton_schulz_dtype`), ``"float32"``,
            ``"bfloat16"``.
        heads, projections, in_out: the Muon block layout (:func:`muon_update`); ``in_out=None`` reads it
            from the model.
        stiefel: every parameter of the group is a frame. role: force one role on a group's
            parameters (``"muon"``, ``"adamw"`` or ``"frame"``; a marked frame stays a frame).
        tol, max_iter: the frame rule's tangency tolerance and iteration cap.
        maximize: maximise the objective (every role), as in torch. foreach: AdamW's implementation,
            as in torch. fused, differentiable: not available; ``True`` raises.

    Reference: Jordan et al. (2024), "Muon"; Bernstein (2025), "Modular Manifolds"; Loshchilov &
    Hutter (2019), AdamW.
    """

    def __init__(self, params: Iterable[Any], lr: float | Tensor = 0.02, momentum: float = 0.95,
                 weight_decay: float = 0.0, *, nesterov: bool = True, frame_lr: float | None = None,
                 adamw_lr: float = 3e-4, betas: tuple[float, float] = (0.9, 0.95), eps: float = 1e-8,
                 adamw_weight_decay: float | None = None, decay_vectors: bool | None = None,
                 adjust_lr_fn: str | None = None, ns_steps: int = 5, ns_dtype: str = "auto", heads: int | None = None,
                 projections: int = 1, in_out: bool | None = None, stiefel: bool = False, role: str | None = None,
                 tol: float = 1e-3, max_iter: int = 20, maximize: bool = False, foreach: bool | None = None,
                 fused: bool | None = None, differentiable: bool = False) -> None:
        defaults = dict(lr=lr, momentum=momentum, weight_decay=weight_decay, nesterov=nesterov, frame_lr=frame_lr,
                        adamw_lr=adamw_lr, betas=betas, eps=eps, adamw_weight_decay=adamw_weight_decay,
                        decay_vectors=decay_vectors, adjust_lr_fn=adjust_lr_fn, ns_steps=ns_steps, ns_dtype=ns_dtype,
                        heads=heads, projections=projections, in_out=in_out, stiefel=stiefel, role=role, tol=tol,
                        max_iter=max_iter, maximize=maximize, foreach=foreach, fused=fused,
                        differentiable=differentiable)
        check_options(defaults)
        self._guesses: list[str] | None = []  # collected over the constructor's groups, warned once
        super().__init__(params, defaults)
        guesses, self._guesses = self._guesses, None
        warn_guesses(guesses)

    def add_param_group(self, param_group: dict[str, Any]) -> None:
        """Check a group and add it as one param group, its options resolved (above)."""
        known = set(self.defaults) | {"params", "param_names", "initial_lr", "name"}
        unknown = sorted(set(param_group) - known)
        if unknown:
            raise ValueError(f"StiefelMuon: unknown param group key(s) {unknown}; known keys: {sorted(known)}")
        own = {k: v for k, v in param_group.items() if not (k in ("frame_lr", "decay_vectors", "in_out") and v is None)}
        params = own["params"]
        params = [params] if isinstance(params, Tensor) else list(params)
        merged = {**self.defaults, **own}
        check_options(merged)
        roles, guesses = [], []
        for j, p in enumerate(params):  # every tensor is checked before the group is added
            name, t = p if isinstance(p, tuple) else (None, p)
            role = group_role(t, name, merged)
            if role.role == "frame":
                check_frame_tensor(t)
            elif role.role == "muon":
                check_muon_tensor(t, merged, role.layout)
            roles.append(role.role)
            if role.guessed:
                guesses.append(f"{name or role.name or f'parameter {j}'} {tuple(t.shape)}: {rule_text(role)} ({role.why})")
        given = own.get("lr")
        frame_lr = own.get("frame_lr", given)
        frame_lr = frame_lr if frame_lr is not None else (
            self.defaults["frame_lr"] if self.defaults["frame_lr"] is not None else self.defaults["lr"])
        adamw_lr = own.get("adamw_lr", given if given is not None else self.defaults["adamw_lr"])
        lead = next((r for r in ("muon", "frame", "adamw") if r in roles), "muon")
        lr = {"muon": merged["lr"], "frame": frame_lr, "adamw": adamw_lr}[lead]
        decay_vectors = own.get("decay_vectors", "weight_decay" in own or "adamw_weight_decay" in own)
        super().add_param_group({**own, "params": params, "lr": lr, "frame_lr": frame_lr, "adamw_lr": adamw_lr,
                                 "decay_vectors": decay_vectors})
        self.param_groups[-1]["base_lr"] = float(lr)
        if self._guesses is not None:
            self._guesses += guesses
        else:
            warn_guesses(guesses)

    def _plan(self, group: dict[str, Any]) -> tuple[list[Role], dict[str, float | Tensor]]:
        """Each parameter's role in ``group``, and each role's lr now (the group's lr moves them all)."""
        names = group.get("param_names") or [None] * len(group["params"])
        roles = [group_role(p, name, group) for p, name in zip(group["params"], names)]
        present = {r.role for r in roles}
        lead = next((r for r in ("muon", "frame", "adamw") if r in present), "muon")
        lr = group["lr"].item() if isinstance(group["lr"], Tensor) else group["lr"]
        scale = lr / group["base_lr"] if group.get("base_lr") else 1.0
        lrs = {r: lr if r == lead else _value(group[_LR_KEY[r]]) * scale for r in ROLES}
        return roles, lrs

    def _decay(self, group: dict[str, Any], role: Role) -> float:
        if role.role == "frame":
            return 0.0
        wd = group["weight_decay"] if role.role == "muon" or group["adamw_weight_decay"] is None \
            else group["adamw_weight_decay"]
        return _value(wd) if role.decayed_by_default or group["decay_vectors"] else 0.0

    def roles(self) -> list[dict[str, Any]]:
        """One row per parameter: ``group``, ``name``, ``shape``, ``role``, ``kind``, ``rule`` (how it
        steps), ``lr`` and ``weight_decay`` (now), ``why`` (how its role was found), ``guessed``."""
        rows = []
        for i, group in enumerate(self.param_groups):
            roles, lrs = self._plan(group)
            names = group.get("param_names") or [None] * len(roles)
            for j, (p, role, name) in enumerate(zip(group["params"], roles, names)):
                rows.append({"group": i, "name": name or role.name or f"param {j}", "shape": tuple(p.shape),
                             "role": role.role, "kind": role.kind, "rule": rule_text(role, p, group),
                             "lr": lrs[role.role], "weight_decay": self._decay(group, role), "why": role.why,
                             "guessed": role.guessed})
        return rows

    def role_table(self) -> str:
        """:meth:`roles` as one table: ``print(opt.role_table())``."""
        rows = self.roles()
        head = ("parameter", "shape", "rule", "lr", "decay", "found by")
        cells = [(r["name"], "x".join(map(str, r["shape"])) or "scalar", r["rule"], f"{r['lr']:.3g}",
                  f"{r['weight_decay']:.3g}", r["why"] + (" [guessed]" if r["guessed"] else "")) for r in rows]
        widths = [max(len(c[k]) for c in [head, *cells]) for k in range(len(head))]
        counts = {r: sum(row["role"] == r for row in rows) for r in ROLES}
        lines = [f"StiefelMuon roles: {counts['frame']} frames (manifold Muon), {counts['muon']} Muon, "
                 f"{counts['adamw']} AdamW, in {len(self.param_groups)} param group(s)"]
        lines += ["  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip() for row in [head, *cells]]
        return "\n".join(lines)

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

        Every gradient is checked first (one host synchronisation): a non-finite or sparse one raises
        ``ValueError`` naming the parameter, and nothing changes.
        """
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        live = [(i, j, p) for i, g in enumerate(self.param_groups) for j, p in enumerate(g["params"])
                if p.grad is not None]
        for i, j, p in live:
            if p.grad.is_sparse:
                raise ValueError(f"StiefelMuon: the gradient of {self._label(i, j)} is sparse (nn.Embedding(sparse="
                                 "True)?); StiefelMuon takes dense gradients: build it with sparse=False, or train it "
                                 "with torch.optim.SparseAdam in an optimizer of its own")
        mesh = _dt.mesh_of([p for _, _, p in live])
        finite = [torch.isfinite(_dt.local(p.grad)).all() for _, _, p in live]
        if finite and not _dt.all_true(torch.stack(finite).all(), mesh):
            bad = next(((i, j) for (i, j, _), ok in zip(live, finite) if not bool(ok)), None)
            where = self._label(*bad) if bad else "a parameter on another rank"
            raise ValueError(f"StiefelMuon: the gradient of {where} is not finite (NaN or inf); no parameter or "
                             "state was changed. Lower the learning rate, clip gradients, or skip the step")
        for group in self.param_groups:
            roles, lrs = self._plan(group)
            live_roles = [(p, r) for p, r in zip(group["params"], roles) if p.grad is not None]
            frames = [p for p, r in live_roles if r.role == "frame"]
            if frames:
                self._frame_step(frames, group, lrs["frame"])
            for p, r in live_roles:
                if r.role == "muon":
                    self._muon_step(p, r, group, lrs["muon"])
            by_decay: dict[float, list[Tensor]] = {}  # AdamW's step takes one decay per call
            for p, r in live_roles:
                if r.role == "adamw":
                    by_decay.setdefault(self._decay(group, r), []).append(p)
            for wd, ps in by_decay.items():
                adamw_step(ps, self.state, lr=lrs["adamw"], betas=group["betas"], eps=group["eps"], weight_decay=wd,
                           foreach=group["foreach"], maximize=group["maximize"], owner="StiefelMuon")
        return loss

    def _label(self, i: int, j: int) -> str:
        group = self.param_groups[i]
        p = group["params"][j]
        name = (group.get("param_names") or [None] * (j + 1))[j] or getattr(marked(p), "name", "")
        return f"{parameter_label(group, i, j, p, name or None)} role {group_role(p, name, group).role!r}"

    def _direction(self, p: Tensor, group: dict[str, Any]) -> Tensor:
        """The Nesterov momentum direction of ``p`` (torch.optim.Muon's lerp form), its buffer updated."""
        g = _dt.local(p.grad)
        if group["maximize"]:
            g = -g
        state = self.state[p]
        if "momentum_buffer" not in state:
            state["momentum_buffer"] = torch.zeros_like(p.grad)
        buf = _dt.local(state["momentum_buffer"])
        buf.lerp_(g, 1 - group["momentum"])
        return g.lerp(buf, group["momentum"]) if group["nesterov"] else buf

    def _muon_step(self, p: Tensor, role: Role, group: dict[str, Any], lr: float) -> None:
        if _dt.is_dtensor(p) and any(not pl.is_replicate() and getattr(pl, "dim", 0) % p.dim() >= p.dim() - 2
                                     for pl in p.placements):
            raise ValueError(
                f"StiefelMuon: a Muon matrix of shape {tuple(p.shape)} is sharded across ranks "
                f"({tuple(p.placements)}); Muon orthogonalises whole matrices. Give it role='adamw', keep "
                "it out of the sharding (fully_shard(..., ignored_params=...)), or gather it")
        U = self._direction(p, group)
        w = _dt.local(p)
        in_out, flatten = muon_layout(p, role, group)
        ns_dtype = newton_schulz_dtype(p.device) if group["ns_dtype"] == "auto" else getattr(torch, group["ns_dtype"])
        w.mul_(1 - lr * self._decay(group, role))
        w.add_(muon_update(U, lr, heads=group["heads"], projections=group["projections"], in_out=in_out,
                           flatten=flatten, adjust_lr_fn=group["adjust_lr_fn"], ns_steps=group["ns_steps"],
                           ns_dtype=ns_dtype))

    def _frame_step(self, frames: list[Tensor], group: dict[str, Any], lr: float) -> None:
        # Frames of one shape are stacked so that the multiplier's iteration runs once per bucket.
        buckets: dict[tuple, list[Tensor]] = {}
        for p in frames:
            if _dt.local(p).numel():
                buckets.setdefault((tuple(_dt.local(p).shape), p.dtype, p.device), []).append(p)
        for ps in buckets.values():
            U = torch.stack([self._direction(p, group) for p in ps])  # (k, ..., r, c)
            W = torch.stack([_dt.local(p) for p in ps])
            lead = W.shape[:-2]
            r, c = W.shape[-2:]
            mult = [self.state[p].get("multiplier") for p in ps]
            m = torch.stack([_dt.local(x) for x in mult]).reshape(-1, min(r, c), min(r, c)) \
                if all(x is not None for x in mult) else None
            A, m_new, _ = manifold_muon_update(W.reshape(-1, r, c), U.reshape(-1, r, c), lr,
                                                multiplier=m, tol=group["tol"], max_iter=group["max_iter"])
            W_new = polar_gram(W.reshape(-1, r, c) + A).reshape(W.shape)
            m_new = m_new.reshape(*lead, min(r, c), min(r, c))
            for k, p in enumerate(ps):
                _dt.local(p).copy_(W_new[k])
                shape = (*p.shape[:-2], min(r, c), min(r, c))
                self.state[p]["multiplier"] = _dt.like(m_new[k].clone(), p, shape)


def _value(x: float | Tensor) -> float:
    return x.item() if isinstance(x, Tensor) else x
