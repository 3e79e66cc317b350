"""Notebook 02's wait/launch section without a GPU, in one kernel: on two recorded cards of one GPU with
these cells (synthetic: made-up timings, clearly not GPU data) and another host, it shows the newer card's
cells, fits and anchors, and the two compared with the host-side mark."""
import pytest

from dspark_lab.results.analyses import card as C
from dspark_lab.results.analyses import card_primitives as P
from helpers import NOTEBOOKS_DIR, execute_notebook, kernel_env, printed
from test_card_primitives import card_with

nbformat = pytest.importorskip("nbformat")
pytest.importorskip("nbclient")


def _cells(tag: str) -> list:
    nb = nbformat.read(NOTEBOOKS_DIR / "02_tuning_new_gpu.ipynb", as_version=4)
    return [c for c in nb.cells if tag in c.metadata.get("tags", []) and c.cell_type == "code"]


def test_the_wait_launch_section_shows_the_cells_the_anchors_and_the_host_side_comparison(tmp_path):
    machines = tmp_path / "data" / "machines"
    machines.mkdir(parents=True)
    old, new = card_with(), card_with(host={"cpu_model": "SYNTH-CPU-2", "governor": "powersave"})
    old["recorded"], new["recorded"] = "2026-01-01T10:00:00+00:00", "2026-01-02T10:00:00+00:00"
    for c in new["primitives"]:
        if c["name"] == "pin_fresh":
            c["host_us"] = [4.0, 4.1, 4.2]  # cheap on the new host: a verdict that differs
    C.save(old, machines / "synth-card-1.json")
    C.save(new, machines / "synth-card-2.json")
    nb = nbformat.v4.new_notebook()
    loads = [c for c in _cells("platform-card") if "card_results.recorded()" in c.source]
    nb.cells = loads + _cells("wait-launch")
    assert len(nb.cells) == 4
    execute_notebook(nb, kernel_env(tmp_path / "data", tmp_path / "out"))
    text = printed(nb.cells)
    assert "synth-card-2.json" in text and P.PRIMITIVE_RULE in text
    assert "per node, the decode shape costs more to launch here" in text
    assert "host-side (CPU model: SYNTH-CPU-2 vs SYNTH-CPU; frequency governor: powersave vs performance)" in text
    assert "pin_fresh 4 KB (empty): a cheap (4.10 µs) | b costs host time (41.00 µs) [host-side]" in text
    shown = "".join(o["data"].get("text/plain", "") for c in nb.cells for o in c.outputs if "data" in o)
    assert "CUDA.jl #2162" in shown and "graph_decode 1000 nodes" in shown
