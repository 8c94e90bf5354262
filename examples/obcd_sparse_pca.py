"""Sparse PCA with OBCD on scikit-learn's digits (offline data), ℓ0 and ℓ1 penalties.
==================================================================================

::

    python examples/obcd_sparse_pca.py [--r 8] [--iterations 100]

OBCD changes two rows of X per iteration by an exact O(2) step; with the quadratic oracle it reads
only two rows of ∇f = −2CX and updates CX in O(n r), and F = f + h never increases.
"""

from __future__ import annotations

import argparse

import torch

from orthoplug.geometry.stiefel import StiefelGeometry
from orthoplug.problems import spca
from orthoplug.solvers.obcd import OBCD


def main(argv=None):
    ap = argparse.ArgumentParser(description="OBCD sparse PCA on digits")
    ap.add_argument("--r", type=int, default=8)
    ap.add_argument("--iterations", type=int, default=100)  # n/2 = 32 pair updates each
    ap.add_argument("--plot", action="store_true", help="draw F = f + h against iterations")
    args = ap.parse_args(argv)

    c = spca.covariance(spca.digits_data())  # C = ÂᵀÂ, Â = A/‖A‖_F, n = 64
    n, r = c.shape[0], args.r
    top = float(torch.linalg.eigvalsh(c)[-1])
    out = {}
    for prob in (spca.l1_spca(c, r, 0.1 * top / n**0.5), spca.l0_spca(c, r, 0.1 * top / n)):
        # --plot: about 100 evaluations for the curve (default: one per sweep of the row pairs)
        every = max(1, args.iterations // 100) if args.plot else None
        res = OBCD(prob.h, seed=0, max_iterations=args.iterations, eval_every=every).run(
            prob.oracle, prob.initial_point("identity"), StiefelGeometry(n, r))
        nnz = spca.count_l0(res.point)
        print(f"{prob.kind}: F = {res.cost:.6f} (f = {res.info['f']:.6f}, h = {res.info['h']:.6f})"
              f", nonzeros {nnz}/{n * r}, ‖XᵀX − I‖ = {res.violation:.1e}")
        out[prob.kind] = res
    if args.plot:
        import matplotlib.pyplot as plt

        fig, axes = plt.subplots(1, 2, figsize=(8, 3.2))
        for ax, (kind, res) in zip(axes, out.items(), strict=True):
            ax.plot(res.history["iteration"], res.history["cost"])
            ax.set(xlabel="iteration (pair updates)", ylabel="F = f + h", title=f"OBCD, {kind}")
            ax.grid(alpha=0.3)
        fig.tight_layout()
        plt.show()
    return out


if __name__ == "__main__":
    main()
