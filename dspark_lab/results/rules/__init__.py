"""Rules and statistics over rows: medians and CIs (stats), disturbed trials (noise), choosing rows
and points (selection), summaries and comparisons, the names of runs and points (labels), filters."""
