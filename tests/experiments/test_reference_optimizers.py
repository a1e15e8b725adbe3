"""The reference optimizers the comparisons run: Muon's Newton-Schulz step and its update."""

from __future__ import annotations

import pytest
import torch

from stiefel_mini.experiments.reference_optimizers import Muon, newton_schulz


@pytest.mark.parametrize("shape", [(3, 256, 64), (64, 256), (32, 32)])
def test_newton_schulz_pushes_singular_values_near_one(shape):
    G = torch.randn(shape, generator=torch.Generator().manual_seed(0))
    O = newton_schulz(G)
    assert O.shape == G.shape
    sv = torch.linalg.svdvals(O)
    assert sv.min() > 0.5 and sv.max() < 1.3  # the quintic's band, not exact convergence
    # Same singular vectors as G: O is close to the polar factor U V^T.
    U, _, Vh = torch.linalg.svd(G, full_matrices=False)
    assert torch.linalg.norm(O - U @ Vh) / torch.linalg.norm(U @ Vh) < 0.35


def test_muon_step_is_the_orthogonalised_nesterov_momentum():
    g = torch.Generator().manual_seed(1)
    W0, G = torch.randn(8, 4, generator=g), torch.randn(8, 4, generator=g)
    W = torch.nn.Parameter(W0.clone())
    opt = Muon([W], lr=0.1, momentum=0.9, weight_decay=0.5)
    W.grad = G.clone()
    opt.step()
    # B = G (from zero), O = NS(G + 0.9 B), W <- (1 - lr wd) W - lr sqrt(max(1, r/c)) O
    expected = (1 - 0.1 * 0.5) * W0 - 0.1 * 2.0 ** 0.5 * newton_schulz(G + 0.9 * G)
    torch.testing.assert_close(W.detach(), expected)


def _one_step(weight: torch.Tensor, grad: torch.Tensor, **group) -> torch.Tensor:
    p = torch.nn.Parameter(weight.clone())
    p.grad = grad.clone()
    Muon([{"params": [p], **group}], lr=0.1, momentum=0.0).step()
    return (weight - p.detach()) / 0.1  # the update times its shape factor


def test_muon_on_a_conv1d_layout_is_muon_on_its_transpose():
    g = torch.Generator().manual_seed(0)
    w, grad = torch.randn(8, 32, generator=g), torch.randn(8, 32, generator=g)  # (in, out)
    torch.testing.assert_close(_one_step(w, grad, in_out=True), _one_step(w.T, grad.T).T)
    # fan_out / fan_in = 4: the factor sqrt(4) = 2 multiplies the orthogonal update
    torch.testing.assert_close(_one_step(w, grad, in_out=True), 2.0 * newton_schulz(grad))


def test_muon_on_head_blocks_orthogonalises_the_whole_projection():
    g = torch.Generator().manual_seed(1)
    H, n, d = 4, 16, 4
    w, grad = torch.randn(H, n, d, generator=g), torch.randn(H, n, d, generator=g)
    merged = newton_schulz(grad.permute(1, 0, 2).reshape(n, H * d))  # (n, H d), square here
    torch.testing.assert_close(_one_step(w, grad, heads=True), merged.reshape(n, H, d).permute(1, 0, 2))
    per_head = newton_schulz(grad)
    assert not torch.allclose(_one_step(w, grad, heads=True), per_head, atol=1e-3)


def test_muon_refuses_vectors_and_flat_head_blocks():
    with pytest.raises(ValueError, match="give vectors and embeddings to AdamW"):
        Muon([torch.nn.Parameter(torch.zeros(4))])
    with pytest.raises(ValueError, match="heads=True"):
        Muon([{"params": [torch.nn.Parameter(torch.zeros(4, 4))], "heads": True}])
