"""Training loops of the papers' learning problems on the geoopt front-end: UltraE knowledge-graph
embeddings on O(J) (:mod:`~orthoplug.training.ultrae`) and orthogonal networks on Stiefel
(:mod:`~orthoplug.training.orthonet`). They sit above the adapters, so they can build orthoplug's
torch optimizers; the problems layer below them never imports a solver or an adapter."""
