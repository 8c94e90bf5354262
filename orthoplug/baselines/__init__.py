"""Comparison methods from the papers that pymanopt and geoopt lack (one module per method)."""
