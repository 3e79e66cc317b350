"""Legend room: every entry plotly draws is counted, and wrapped entries take columns as wide as the
widest, so a legend below the plot never runs into the note above it (seen in notebook 01's breakdown)."""
import plotly.graph_objects as go

from dspark_lab.views import figures


def test_every_trace_of_a_legend_group_has_its_entry():
    fig = go.Figure([go.Bar(name="a", legendgroup="host"), go.Bar(name="b", legendgroup="host"),
                     go.Bar(name="c", legendgroup="gpu", showlegend=False), go.Bar()])
    assert figures.legend_entries(fig) == ["a", "b"]


def test_wrapped_entries_take_columns_as_wide_as_the_widest():
    short = ["x" * 10] * 6  # 120 px each: all on one row of 800 px
    assert figures.legend_rows(short, 800) == 1
    names = ["x" * 10] * 5 + ["y" * 50]  # widest 400 px: 2 columns in 800 px -> 3 rows
    assert figures.legend_rows(names, 800) == 3
    assert figures.legend_rows(["z" * 200], 800) == 1 and figures.legend_rows([], 800) == 0


def test_the_breakdown_leaves_room_for_its_legend_and_its_note():
    from helpers import synthetic_runs

    rows, _, _ = synthetic_runs(runs=(("run-a", "SYNTH-GPU-A", "1.0"),), eps=(2,), batches=(8,), gammas=(4,))
    rows = rows.assign(disturbed=rows.trial == 0)  # a note: disturbed trials left out
    fig = figures.step_breakdown(rows)
    names = figures.legend_entries(fig)
    assert len(names) == len([t for t in fig.data if t.name])  # host and GPU parts each have an entry
    rows_needed = figures.legend_rows(names, figures.DEFAULT_WIDTH_PX - 80)
    assert fig.layout.margin.b >= 70 + figures.LEGEND_ROW_PX * rows_needed + 22
