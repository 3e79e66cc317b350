"""A gallery of real host-sync pitfalls, each beside its fix (see registry.py for the cases and
cases.py for the code). `record`/`load` in report.py measure them or read a recorded run."""
from dspark_lab.gallery.cases import SCALES, State, make_state
from dspark_lab.gallery.registry import CASES, Case, get, names

__all__ = ["CASES", "Case", "SCALES", "State", "get", "make_state", "names"]
