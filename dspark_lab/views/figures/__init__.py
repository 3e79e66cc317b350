"""Tidy rows -> plotly figures: `from dspark_lab.views import figures`, then `figures.sync_counts(rows)`,
`figures.export(fig, "out/comparison")`. Pure functions: a DataFrame (or a PointView) in, a `go.Figure` out.

Every number drawn comes from the rows (`schema.ROW_COLUMNS`), and every figure names, in its
subtitle, the GPU, driver, torch and date of the rows it shows (`schema.FINGERPRINT_COLUMNS`).

The per-point figures (`sync_counts`, `step_breakdown`, `sync_cost`, `strategy_comparison`,
`timeline`) show ONE config point per recorded run (several runs of the same point are set side by
side, e.g. two GPUs); pick a point with `results.Runs` (nearest / reference). Each takes the point's
rows or its `results.viewmodels.point_view.PointView`. `sweep` shows many points. Trace sets are stable (one
trace per part or kind, present even when empty) so a widget can update data in place.

Modules, one concern each: style (names, colours), layout (title block, legend, notes), point (the
per-point figures), sweeps, timelines, ranks (real EP runs, per rank), render (plotly.js config,
static export). This module only names what notebooks, the panel and the report call. Importing it
changes nothing global: notebooks call `figures.apply_display_config()` once.
"""
from dspark_lab.views.figures.layout import (DEFAULT_WIDTH_PX, LEGEND_ROW_PX, fit_layout, fold_subtitle,
                                             legend_entries, legend_rows)
from dspark_lab.views.figures.point import step_breakdown, strategy_comparison, sync_cost, sync_counts
from dspark_lab.views.figures.render import (PLOTLY_CONFIG, SLIDE_SIZES, apply_display_config, as_widget, export,
                                             folded_title, panel_figure, FigureBox, figure_bundle,
                                             save_image, slide_size, widget_config)
from dspark_lab.views.figures.style import PART_COLORS, PART_NAMES, SYNC_KINDS, TIMELINE_NAMES
from dspark_lab.views.figures.sweeps import sweep
from dspark_lab.views.figures.timelines import timeline

__all__ = [
    "sync_counts", "step_breakdown", "sync_cost", "strategy_comparison", "timeline", "sweep",
    "export", "save_image", "as_widget", "folded_title", "slide_size", "SLIDE_SIZES", "PLOTLY_CONFIG", "apply_display_config", "widget_config", "panel_figure", "FigureBox", "figure_bundle",
    "fit_layout", "fold_subtitle", "legend_entries", "legend_rows", "DEFAULT_WIDTH_PX", "LEGEND_ROW_PX",
    "PART_NAMES", "PART_COLORS", "SYNC_KINDS", "TIMELINE_NAMES",
]
