"""bench/map_scale.py at 16 nodes: every round recorded by the map writer with a simulated meter on
every node, the file analysed with every output, the schedule and plan timed, the table and the JSON
of those figures."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def test_the_map_scale_bench_records_analyses_and_plans_a_small_map(tmp_path):
    out = tmp_path / "figures.json"
    argv = ["--nodes", "16", "--rounds-limit", "0", "--plan-nodes", "32", "--json", str(out)]
    proc = subprocess.run(
        [sys.executable, str(REPO / "bench" / "map_scale.py"), *argv, "--dir", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    rows = [ln for ln in proc.stdout.splitlines() if ln.startswith("|")]
    assert len(rows) == 6 and all(ln.count("|") == 10 for ln in rows[:3])
    assert rows[2].startswith("| 16 | 15 / 15 |") and "(actual)" in rows[2] and rows[2].endswith("| 0 |")
    assert rows[5].startswith("| 32 | ")
    got = json.loads(out.read_text())
    (m,) = got["maps"]
    assert (m["recorded_per_size"], m["rounds_per_size"], m["partial"]) == (15, 15, False)
    assert 0 < m["store_ms_median"] <= m["store_ms_p95"] <= m["store_ms_max"]
    assert m["power_interval_s"] == 1.0 and m["power_append_s"] > 0  # a simulated meter on every node
    a = m["analysis"]
    assert a["exit"] == 0 and a["plots"] > 5  # the heat maps, and the energy's
    assert a["outputs"] == ["map.csv", "map.html", "map.json", "plots"]
    assert "(cluster map)" in a["first_lines"][0] and "status: complete" in a["first_lines"][1]
    (p,) = got["plans"]
    assert p["exit"] == 0 and p["rounds"] == 31 and p["sample_k"] == 3
    assert list(tmp_path.glob("map_scale_*")) == []  # the map file and outputs deleted
