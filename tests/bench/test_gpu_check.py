"""``benchmarks/gpu_check.py`` runs (on the CPU here): every optimizer and core solver it checks
stays feasible to its dtype's precision and repeats its CPU run bit for bit."""

import json
import subprocess
import sys
from pathlib import Path

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"


def test_gpu_check_on_cpu(tmp_path):
    out = tmp_path / "check.json"
    subprocess.run([sys.executable, "gpu_check.py", "--device", "cpu", "--steps", "3",
                    "--repeats", "1", "--json", str(out)], cwd=BENCHMARKS, check=True,
                   capture_output=True, text=True)
    record = json.loads(out.read_text())
    rows = record["geoopt"]
    assert len(rows) == 16
    for row in rows:
        assert "refused" not in row, row
        assert row["device"] == "cpu"
        tol = 1e-5 if row["dtype"] == "torch.float32" else 1e-12
        assert row["violation"] < tol, row
        assert row["seconds_per_step"] > 0
        assert row["cpu_gap"] == 0.0, row
    assert len(record["core"]) == 6
    for row in record["core"]:
        assert row["device"] == "cpu" and row["cpu_gap"] == 0.0 and row["violation"] < 1e-12, row
