"""The version of orthoplug: the one source read by the build (pyproject.toml) and the package."""

__version__ = "0.2.0.dev0"
