"""Package discovery for setuptools (all metadata lives in pyproject.toml).

Every package under ``orthoplug/`` is found by ``find_packages``; the front-ends in ``adapters/``
are installed as ``orthoplug.adapters`` (the mapping is ``package-dir`` in pyproject.toml).
"""

from setuptools import find_packages, setup

setup(packages=[*find_packages(include=["orthoplug", "orthoplug.*"]), "orthoplug.adapters"])
