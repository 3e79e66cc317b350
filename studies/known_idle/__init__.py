"""The known-idle cases' profiled traces (traces, on a GPU) and their charge re-read with the
current rule beside the measured loss (recheck, on CPU; its table is here)."""
