"""float32 acceptance of every geoopt optimizer (the registry's geoopt front-end and
``ColumnJJacobi``): 500 float32 steps on the test problems of :mod:`test_torch_conventions`
(``tr(XᵀCX)`` over O(3, 3), ``−tr(XᵀAX)`` over St(8, 3)) reach the float64 run's loss within 1e-3
(relative) and stay feasible to 1e-5 (relative violation); the float64 run stays feasible to
1e-12. Both runs start from the same float64 point (rounded to float32 for the float32 run).
"""

from __future__ import annotations

import pytest
import torch
from test_torch_conventions import ALL, _loss, _relative_violation, _run

from orthoplug import registry

GEOOPT = sorted(set(registry.names("solver", "geoopt")) | {"ColumnJJacobi"})
STEPS = 500


def test_every_geoopt_optimizer_is_walked():
    assert set(GEOOPT) == set(ALL)


@pytest.mark.parametrize("name", GEOOPT)
def test_float32_reaches_the_float64_loss(name):
    x64, _ = _run(name, torch.float64, STEPS)
    x32, _ = _run(name, torch.float32, STEPS)
    f64 = float(_loss(name, x64.detach()))
    f32 = float(_loss(name, x32.detach().double()))
    assert abs(f32 - f64) <= 1e-3 * abs(f64), (f32, f64)
    assert _relative_violation(x32) <= 1e-5
    assert _relative_violation(x64) <= 1e-12
