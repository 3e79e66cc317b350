"""The sweep's grid as the command line writes it ("1,8", "all"): parsing, with errors that name the
option and the allowed values."""
from __future__ import annotations

from dspark_lab.results.facts import strategy_table
from dspark_lab.config import FIELDS, MODEL_PRESETS
from dspark_lab.run.sweep_spec import SweepSpecError


def allowed_values(name: str) -> str:
    """Human-readable allowed values of a grid field (for error messages and --help)."""
    if name == "ep_size":
        by_model = []
        for model, size in MODEL_PRESETS.items():
            divisors = ",".join(str(d) for d in range(1, size.experts + 1) if size.experts % d == 0)
            by_model.append(f"{divisors} for model {model}")
        return "divisors of the model's expert count: " + "; ".join(by_model)
    if name in ("batch_size", "gamma"):
        lo, hi = FIELDS[name].metadata["range"]
        return f"integers from {lo} to {hi}"
    if name == "strategy":
        return "all, or any of " + ", ".join(strategy_table.names())
    raise KeyError(name)


def _msg(label: str, body: str) -> str:
    return f"{label}: {body}" if label else body


def parse_ints(text: str, name: str, option: str | None = None) -> tuple[int, ...]:
    """'1,8' -> (1, 8). Errors name the option (default: the field; "" for none) and the allowed values."""
    label = name if option is None else option
    allowed = allowed_values(name)
    parts = [p.strip() for p in str(text).split(",")]
    if any(p == "" for p in parts):
        raise SweepSpecError(name, _msg(label, f"expected comma-separated integers such as 1,8; got {text!r} "
                                               f"(allowed: {allowed})"))
    values = []
    for p in parts:
        try:
            v = int(p)
        except ValueError:
            raise SweepSpecError(name, _msg(label, f"{p!r} is not an integer; expected comma-separated "
                                                   f"integers such as 1,8 (allowed: {allowed})")) from None
        if v <= 0:
            raise SweepSpecError(name, _msg(label, f"{v} is not positive (allowed: {allowed})"))
        values.append(v)
    return tuple(dict.fromkeys(values))  # first occurrence of each, in order


def parse_strategies(text: str, option: str | None = None) -> tuple[str, ...]:
    """'all' or 'device_direct,on_demand' -> names; errors list the known strategies."""
    label = "strategy" if option is None else option
    allowed = allowed_values("strategy")
    parts = [p.strip() for p in str(text).split(",")]
    if parts == ["all"]:
        return strategy_table.names()
    if any(p == "" for p in parts):
        raise SweepSpecError("strategy", _msg(label, f"expected comma-separated names; got {text!r} (allowed: {allowed})"))
    unknown = [p for p in parts if p not in strategy_table.names()]
    if unknown:
        raise SweepSpecError("strategy", _msg(label, f"unknown strategy {', '.join(map(repr, unknown))} "
                                                      f"(allowed: {allowed})"))
    return tuple(dict.fromkeys(parts))
