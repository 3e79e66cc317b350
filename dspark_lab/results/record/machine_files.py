"""Machine records under <data>/machines/ (cards, hazards): one JSON object a file, told apart by
their "kind"; read, found and written the same way for every kind. torch-free."""
from __future__ import annotations

import json
import warnings
from pathlib import Path
from typing import Callable

from dspark_lab.results.record.output import write_text_safely
from dspark_lab.results.record.paths import default_data_dir
from dspark_lab.results.record.regular_files import read_regular_text


def read_json(path, what: str) -> dict:
    """The JSON object in `path`, or a ValueError naming the file and what it should have been."""
    p = Path(path)
    try:
        rec = json.loads(read_regular_text(p))  # a FIFO or /dev/zero: refused, never waited on or read on
    except OSError as e:
        raise ValueError(f"{p}: not a readable JSON {what} ({e.strerror or e})") from None
    except (ValueError, RecursionError) as e:
        raise ValueError(f"{p}: not a readable JSON {what} ({str(e)[:200] or 'nested too deeply'})") from None
    if not isinstance(rec, dict):
        raise ValueError(f"{p}: a {what} is a JSON object; got {type(rec).__name__}")
    return rec


def check_head(rec, kind: str, schema: int, where: str, *, fingerprint: bool = True) -> None:
    """A machine record's head: its kind, its schema and (where asked) its fingerprint object, or a
    ValueError naming the field that is wrong and what it may be."""
    if not isinstance(rec, dict) or rec.get("kind") != kind:
        got = rec.get("kind") if isinstance(rec, dict) else rec
        raise ValueError(f"{where}: field 'kind' must be {kind!r}; got {got!r:.80}")
    if rec.get("schema") != schema:
        raise ValueError(f"{where}: field 'schema' must be {schema}; got {rec.get('schema')!r}")
    if fingerprint and not isinstance(rec.get("fingerprint"), dict):
        raise ValueError(f"{where}: field 'fingerprint' must be an object (gpu, driver, cuda, torch)")


def same_machine(rec: dict, fingerprint: dict) -> bool:
    """A machine record (card, hazards, verify) was made on this GPU and driver."""
    fp = rec.get("fingerprint", {})
    return all(str(fp.get(k)) == str(fingerprint.get(k)) for k in ("gpu", "driver"))


def kind_of(path: Path):
    try:
        rec = json.loads(read_regular_text(path))
    except (OSError, ValueError, RecursionError):
        return None
    return rec.get("kind") if isinstance(rec, dict) else None


def load_all(kind: str, load: Callable[[Path], dict], data_dir=None) -> list[dict]:
    """Every record of `kind` under <data>/machines/, by file name, each read with `load`; a damaged
    one is skipped with a warning naming the file and the field, never stopping the others."""
    folder = (Path(data_dir) if data_dir is not None else default_data_dir()) / "machines"
    out = []
    for p in sorted(folder.glob("*.json")):
        if kind_of(p) != kind:
            continue
        try:
            out.append(load(p))
        except ValueError as e:
            warnings.warn(f"{kind} skipped: {e}", stacklevel=3)
    return out


def save_json(rec: dict, path) -> Path:
    """Write a record as indented JSON (never over a run file: results.record.output)."""
    return write_text_safely(Path(path), json.dumps(rec, indent=1, default=str) + "\n")
