"""Test-session settings.

The suite works on small matrices, where torch's intra-op threads only add synchronisation cost
(and thrash badly when the 2-core CI machine is busy), so tests use one thread.
"""

import sys
import textwrap

import pytest
import torch

torch.set_num_threads(1)


@pytest.fixture
def install_plugin(tmp_path, monkeypatch):
    """Install a throw-away distribution whose ``orthoplug.solvers`` entry point is ``ep_value``
    and whose module ``dummy_orthoplug_plugin`` has source ``body``; undone after the test."""
    from orthoplug import registry

    def install(body: str, ep_value: str) -> None:
        (tmp_path / "dummy_orthoplug_plugin.py").write_text(textwrap.dedent(body))
        dist = tmp_path / "dummy_orthoplug_plugin-0.1.dist-info"
        dist.mkdir()
        (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: dummy-orthoplug-plugin\n"
                                       "Version: 0.1\n")
        (dist / "entry_points.txt").write_text(f"[orthoplug.solvers]\n{ep_value}\n")
        monkeypatch.syspath_prepend(str(tmp_path))
        monkeypatch.delitem(sys.modules, "dummy_orthoplug_plugin", raising=False)
        registry.reload_entry_points()

    yield install
    sys.modules.pop("dummy_orthoplug_plugin", None)
    monkeypatch.undo()
    registry.reload_entry_points()
