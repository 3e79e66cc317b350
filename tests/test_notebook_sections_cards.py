"""Two sections without a GPU, run in one kernel: notebook 02's platform card (its cells tagged
"platform-card") draws the recorded cards (heatmaps, the threshold and the claims in words, the card
beside another machine's); notebook 04's hazards (tagged "hazards") show the recorded counts."""
import json

import pytest

from dspark_lab import strategies
from dspark_lab.results.analyses import card as C
from dspark_lab.results.analyses import hazards as H
from helpers import NOTEBOOKS_DIR, execute_notebook, kernel_env, printed, synthetic_card

nbformat = pytest.importorskip("nbformat")
pytest.importorskip("nbclient")


def _section(name: str, tag: str) -> list:
    nb = nbformat.read(NOTEBOOKS_DIR / name, as_version=4)
    return [c for c in nb.cells if tag in c.metadata.get("tags", []) and c.cell_type == "code"]


def test_the_card_and_hazards_sections_draw_the_recorded_files(tmp_path):
    machines = tmp_path / "data" / "machines"
    machines.mkdir(parents=True)
    C.save(synthetic_card(waits_from=4 << 20, recorded="2026-01-02T10:00:00+00:00"), machines / "a-card.json")
    C.save(synthetic_card(gpu="SYNTH-PCIE", waits_from=4), machines / "b-card.json")
    H.save({"kind": H.HAZARDS_KIND, "schema": H.HAZARDS_SCHEMA, "recorded": "2026-01-01T10:00:00+00:00",
            "fingerprint": {"gpu": "SYNTH-GPU-A", "driver": "1.0"}, "steps": 10, "queued_ms_per_step": 0.2,
            "forms": [{"form": f, "wrong": 0 if safe else 7, "n": 10} for f, (_, _, safe, _) in H.FORMS.items()],
            "strategies": [{"strategy": s, "wrong": 0, "n": 10} for s in strategies.BUILTIN]}, machines / "a-hazards.json")
    nb = nbformat.v4.new_notebook()
    card_cells, hazard_cells = _section("02_tuning_new_gpu.ipynb", "platform-card"), _section("04_sync_gallery.ipynb", "hazards")
    assert len(card_cells) >= 3 and hazard_cells
    nb.cells = card_cells + hazard_cells
    execute_notebook(nb, kernel_env(tmp_path / "data", tmp_path / "out"))
    text = printed(nb.cells)
    assert "unexpected" not in text and "10 steps per form" in text
    tables = [o["data"]["text/plain"] for c in hazard_cells for o in c.outputs if "text/plain" in o.get("data", {})]
    table = next(t for t in tables if "PITFALL" in t)  # the forms' table (later cells: the window, the stories)
    assert "7 of 10" in table and "PITFALL" in table
    assert "the card recorded on SYNTH-GPU-A" in text and C.VERDICT_RULE in text
    assert "returns at once up to 1 MB and waits for 10 ms of queued GPU work from 4 MB" in text
    assert "with a different verdict" in text
    figs = [json.loads(json.dumps(o["data"]["application/vnd.plotly.v1+json"])) for c in nb.cells
            for o in c.outputs if "application/vnd.plotly.v1+json" in o.get("data", {})]
    titles = [f["layout"]["title"]["text"] for f in figs]
    assert any(t.startswith("What each copy does on this machine") for t in titles)
    assert any(t.startswith("Two machines' cards: 12 cell(s)") for t in titles)
