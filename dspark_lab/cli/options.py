"""The options that set LabConfig fields, generated from the fields: each field's flag, type, allowed
values, default and help are said once, in config.py (`_about`); `sweep` and `ep` add them from there."""
from __future__ import annotations

import argparse
from dataclasses import dataclass
from typing import Any, Callable

from dspark_lab.results.facts import strategy_table
from dspark_lab.results.record.paths import file_name_part
from dspark_lab.cli.lists import allowed_values, parse_ints, parse_strategies
from dspark_lab.config import FIELDS, choices_of, type_of
from dspark_lab.run.sweep_spec import GRID_FIELDS, PRESETS, SweepSpec, SweepSpecError


class HelpFormatter(argparse.RawDescriptionHelpFormatter):
    """Shows an option's default unless it is unset (None/False) or the help already says it."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        if "(default" in text or action.default in (None, False, True, argparse.SUPPRESS) or not action.option_strings:
            return text
        return text + " (default: %(default)s)"


# ---------------------------------------------------------------------------------------------
# argparse types
# ---------------------------------------------------------------------------------------------
def count_type(minimum: int) -> Callable[[str], int]:
    def parse(text: str) -> int:
        try:
            v = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not an integer (allowed: integers >= {minimum})") from None
        if v < minimum:
            raise argparse.ArgumentTypeError(f"{v} is too small (allowed: integers >= {minimum})")
        return v

    return parse


def _number_in(cast: Callable[[str], float], what: str, lo: float, hi: float) -> Callable[[str], float]:
    def parse(text: str) -> float:
        try:
            v = cast(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not {what} (allowed: {lo} to {hi})") from None
        if not (lo <= v <= hi):
            raise argparse.ArgumentTypeError(f"{v} is out of range (allowed: {lo} to {hi})")
        return v

    return parse


def file_stem(text: str) -> str:
    """--name: one file name inside the chosen folder (results.record.paths.file_name_part)."""
    try:
        return file_name_part(text, "name")
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def float_in(lo: float, hi: float) -> Callable[[str], float]:
    return _number_in(float, "a number", lo, hi)


def int_in(lo: int, hi: int) -> Callable[[str], int]:
    return _number_in(int, "a whole number", lo, hi)


def _list_type(name: str) -> Callable[[str], tuple]:
    def parse(text: str) -> tuple:
        try:
            return parse_strategies(text, option="") if name == "strategy" else parse_ints(text, name, option="")
        except SweepSpecError as e:
            raise argparse.ArgumentTypeError(str(e)) from None

    parse.__name__ = name  # argparse names the type in its messages
    return parse


# ---------------------------------------------------------------------------------------------
# One LabConfig field -> its option
# ---------------------------------------------------------------------------------------------
def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def flag_of(name: str) -> str:
    """The option that sets field `name`, as error messages name it: --name-with-dashes, a bool's
    --name/--no-name."""
    return f"{_flag(name)}/--no-{_flag(name)[2:]}" if type_of(FIELDS[name]) is bool else _flag(name)


def _shown(value: Any) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)


def _help(name: str, shown: Any) -> str:
    """The field's help with the default it states ("{default}" in it, else appended); none when
    `shown` is None, and never for a bool (its help says which flag is the default)."""
    meta = FIELDS[name].metadata
    text = meta["help"]
    if shown is None or type_of(FIELDS[name]) is bool:
        return text
    return text.replace("{default}", _shown(shown)) if "{default}" in text else f"{text} (default: {_shown(shown)})"


def add_config_option(group, name: str, *, default: Any = None, shown: Any = None) -> None:
    """Add the option that sets LabConfig field `name` (dest: the field's name). `default` is what it
    parses to when not given, `shown` the default its help states (None: none)."""
    f = FIELDS[name]
    flag, kind, meta, text = _flag(name), type_of(f), f.metadata, _help(name, shown)
    if kind is bool:
        group.add_argument(flag, dest=name, action="store_true", default=default, help=text)
        group.add_argument("--no-" + flag[2:], dest=name, action="store_false", help=meta["help_off"])
    elif choices_of(f) is not None:
        group.add_argument(flag, dest=name, choices=list(choices_of(f)), default=default, help=text)
    elif kind is int:
        group.add_argument(flag, dest=name, type=count_type(meta["range"][0]), default=default,
                           metavar=meta.get("metavar", "N"), help=text)
    else:
        group.add_argument(flag, dest=name, type=float_in(*meta["range"]), default=default,
                           metavar=meta.get("metavar", "X"), help=text)


# ---------------------------------------------------------------------------------------------
# The sweep's options: the grid, and the base config (every other LabConfig field)
# ---------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class GridOption:
    flag: str
    field: str  # the LabConfig field each value sets
    spec_field: str  # the SweepSpec field the list sets
    help: str  # "{allowed}" is replaced by the allowed values


GRID_OPTIONS = (
    GridOption("--ep", "ep_size", "ep_sizes", "MoE EP sizes, e.g. 1,8 ({allowed})"),
    GridOption("--batch", "batch_size", "batch_sizes",
               "batch sizes, e.g. 1,8,32,128 ({allowed}; padded up to a capture bucket)"),
    GridOption("--gamma", "gamma", "gammas", "draft block sizes, e.g. 2,4,8 ({allowed})"),
    GridOption("--strategy", "strategy", "strategies", "allocation strategies of num_token_non_padded, all "
               "measured at every point with interleaved trials: {allowed}"),
)
# The base-config options in the order --help lists them; a field not named here (a new one) comes
# after them, so that every LabConfig field has its option.
BASE_ORDER = ("model", "workload", "steps", "warmup", "trials", "graph", "device", "target_verify_ms",
              "host_prep_scale", "query_mode", "readback", "moe_a2a_backend", "seed")
BASE_FIELDS = tuple(sorted((n for n in FIELDS if n not in GRID_FIELDS),
                           key=lambda n: BASE_ORDER.index(n) if n in BASE_ORDER else len(BASE_ORDER)))
# Field -> the option that sets it (for error messages), and option dest -> SweepSpec.with_ keyword.
OPTION_OF = {**{g.field: g.flag for g in GRID_OPTIONS}, **{n: flag_of(n) for n in BASE_FIELDS}}
SPEC_KEYWORDS = {**{g.flag[2:]: g.spec_field for g in GRID_OPTIONS}, **{n: n for n in BASE_FIELDS}}


def preset_default(name: str) -> Any:
    """The base config's value that every preset has (what an unset option gives), else None."""
    values = {getattr(spec.base, name) for spec in PRESETS.values()}
    return values.pop() if len(values) == 1 else None


def _grid_help(g: GridOption) -> str:
    if g.field == "strategy":
        allowed = "all, or any of " + "; ".join(f"{k} = {v}" for k, v in strategy_table.describe().items())
    else:
        allowed = allowed_values(g.field)
    return g.help.replace("{allowed}", allowed)


def add_sweep_config_options(p: argparse.ArgumentParser) -> None:
    """The sweep's grid and base-config groups (unset: None, the preset's value then applies)."""
    g = p.add_argument_group("grid (comma-separated lists; unset options come from --preset)")
    g.add_argument("--preset", choices=sorted(PRESETS), default=None,
                   help="starting grid: default = " + PRESETS["default"].describe()
                   + "; quick = " + PRESETS["quick"].describe() + " (default: default)")
    for opt in GRID_OPTIONS:
        g.add_argument(opt.flag, type=_list_type(opt.field), default=None, metavar="LIST", help=_grid_help(opt))
    c = p.add_argument_group("base config (unset options come from --preset)")
    for name in BASE_FIELDS:
        add_config_option(c, name, shown=preset_default(name))


# Per point with --target-ci alone: 24 default points x 8 s of trials stays within a few minutes.
DEFAULT_TIME_CAP_S = 8.0


def spec_from_args(args: argparse.Namespace, parser: argparse.ArgumentParser) -> tuple[SweepSpec, bool]:
    """The sweep asked for on the command line, and whether any grid/config option was given."""
    spec = PRESETS[args.preset or "default"]
    changes = {kw: getattr(args, dest) for dest, kw in SPEC_KEYWORDS.items() if getattr(args, dest) is not None}
    try:
        spec = spec.with_(**changes)
    except SweepSpecError as e:
        parser.error(f"argument {OPTION_OF.get(e.field, e.field)}: {e}")
    return spec, bool(changes) or args.preset is not None
