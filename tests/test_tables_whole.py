"""Tables drawn whole (views/tables.py): the full text of every cell, where pandas' default cuts it;
notebook 04 draws its text tables that way."""
import nbformat
import pandas as pd
import pytest
from pathlib import Path

from dspark_lab.views.tables import whole

LONG = ("the host waits in the copy call for everything queued before it, " * 3).strip()


def test_a_long_cell_is_cut_by_default_and_whole_through_whole():
    df = pd.DataFrame({"case": ["a"], "why": [LONG]})
    assert LONG not in df._repr_html_()  # pandas' default: cut at max_colwidth with an ellipsis
    assert LONG in whole(df)._repr_html_() and LONG in repr(whole(df))
    assert pd.get_option("display.max_colwidth") == 50  # the caller's options untouched


def test_whole_refuses_what_is_not_a_table():
    with pytest.raises(TypeError, match="takes a pandas DataFrame; got list"):
        whole([1, 2])


def test_notebook_04_draws_its_text_tables_whole():
    nb = nbformat.read(Path(__file__).resolve().parents[1] / "notebooks" / "04_sync_gallery.ipynb", 4)
    code = [c.source for c in nb.cells if c.cell_type == "code"]
    last_lines = [src.strip().splitlines()[-1] for src in code if src.strip()]
    for table in ("gb.table()", "GROUPS", "hazards.stories(hz)"):
        shown = [line for line in last_lines if table in line]
        assert shown and all("whole(" in line for line in shown), (table, shown)
