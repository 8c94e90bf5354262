"""Random draws that are the same on every device.

torch's CPU and CUDA generators are different algorithms (Mersenne Twister and Philox), so one
seed gives two different streams on two devices. Every draw in orthoplug is therefore made on
the device of its generator — the CPU for the solvers' and optimizers' generators, and for the
default generator when none is given — and then moved to the device of the tensors it serves.
One seed gives one stream, and a solver's iterates do not depend on the device beyond rounding.
The cost is the transfer of the draws (indices, or one Gaussian matrix per Haar draw).
"""

from __future__ import annotations

import torch

__all__ = ["randn", "rand", "randint", "randperm"]


def _source(generator: torch.Generator | None) -> torch.device:
    """Where a draw with ``generator`` is made: the generator's device, else the CPU."""
    return generator.device if generator is not None else torch.device("cpu")


def randn(*size: int, generator: torch.Generator | None = None, dtype: torch.dtype | None = None,
          device: torch.device | str | None = None) -> torch.Tensor:
    """Standard normal draws of shape ``size``, made on the generator's device, on ``device``."""
    return torch.randn(*size, generator=generator, dtype=dtype,
                       device=_source(generator)).to(device)


def rand(*size: int, generator: torch.Generator | None = None, dtype: torch.dtype | None = None,
         device: torch.device | str | None = None) -> torch.Tensor:
    """Uniform draws on ``[0, 1)`` of shape ``size``, made on the generator's device, on
    ``device``."""
    return torch.rand(*size, generator=generator, dtype=dtype,
                      device=_source(generator)).to(device)


def randint(high: int, size: tuple[int, ...], *, generator: torch.Generator | None = None,
            device: torch.device | str | None = None) -> torch.Tensor:
    """Uniform integers in ``[0, high)`` of shape ``size``, made on the generator's device, on
    ``device``."""
    return torch.randint(high, size, generator=generator, device=_source(generator)).to(device)


def randperm(n: int, *, generator: torch.Generator | None = None,
             device: torch.device | str | None = None) -> torch.Tensor:
    """A uniformly random permutation of ``range(n)``, made on the generator's device, on
    ``device``."""
    return torch.randperm(n, generator=generator, device=_source(generator)).to(device)
