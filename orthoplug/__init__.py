"""orthoplug: orthogonality and J-orthogonality solvers for pymanopt and geoopt."""

__version__ = "0.1.0"
