"""HSPP's hand-derived gradient (issue #17) against torch autograd of its value."""

from __future__ import annotations

import pytest
import torch

from orthoplug.geometry.manifolds import JOrthogonalGeometry
from orthoplug.problems.hspp import HSPP, make_hspp_data


def autograd_gradient(prob: HSPP, x: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
    xr = x.clone().requires_grad_(True)
    return torch.autograd.grad(prob.component_value(xr, idx), xr)[0]


@pytest.mark.parametrize("alpha, chunk", [(1.0, 1024), (0.7, 5)])
def test_hand_gradient_matches_autograd_on_both_branches(alpha, chunk):
    m, n = 30, 6
    prob = HSPP(make_hspp_data(m, n, source="gaussian", seed=2), n // 2, alpha=alpha,
                chunk=chunk)
    geo = JOrthogonalGeometry(n, n // 2)
    gen = torch.Generator().manual_seed(4)
    for idx in (torch.arange(m), torch.tensor([3, 3, 17, 29, 0])):
        for _ in range(3):
            x = geo.random_point(cond=5.0, generator=gen)
            q = prob.probe(x)
            u = ((q * prob.jk.like(q)) @ q.T).abs() / alpha**2
            off = ~torch.eye(m, dtype=torch.bool)
            # the points exercise both branches of d_α (arccosh for u ≥ 1, arccos below)
            assert (u[off] > 1).any() and (u[off] < 1).any()
            value, grad = prob.component_value_and_gradient(x, idx)
            assert torch.equal(value, prob.component_value(x, idx))
            torch.testing.assert_close(grad, autograd_gradient(prob, x, idx),
                                       rtol=1e-10, atol=1e-13)


def test_hand_gradient_matches_autograd_for_a_rectangular_probe_and_given_targets():
    m, n = 20, 6
    data = make_hspp_data(m, n, source="digits", seed=1)
    targets = 0.5 * torch.cdist(data, data) ** 2
    prob = HSPP(data, 3, k_signature=[1, 1, -1, -1], targets=targets)
    x = torch.linalg.qr(torch.randn(n, n, generator=torch.Generator().manual_seed(0),
                                    dtype=torch.float64))[0][:, :4]
    idx = torch.arange(m)
    _, grad = prob.component_value_and_gradient(x, idx)
    torch.testing.assert_close(grad, autograd_gradient(prob, x, idx), rtol=1e-10, atol=1e-13)


def test_hand_gradient_is_zero_where_the_clamp_holds_as_autograd_says():
    # two equal data rows give u = 1 exactly between them: clamped, no slope from that pair
    data = make_hspp_data(8, 4, source="gaussian", seed=0)
    data[1] = data[0]
    prob = HSPP(data, 2)
    x = JOrthogonalGeometry(4, 2).random_point(cond=3.0,
                                               generator=torch.Generator().manual_seed(1))
    idx = torch.arange(8)
    value, grad = prob.component_value_and_gradient(x, idx)
    assert torch.isfinite(value) and torch.isfinite(grad).all()
    torch.testing.assert_close(grad, autograd_gradient(prob, x, idx), rtol=1e-10, atol=1e-13)
