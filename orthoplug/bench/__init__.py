"""``orthoplug-bench``: the seed papers' experiments, orthoplug against pymanopt, geoopt and the
papers' baselines, written as JSON lines, Markdown tables and PNG convergence plots."""
