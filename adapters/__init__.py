"""Bridges to pymanopt and geoopt (installed as ``orthoplug.adapters``)."""
