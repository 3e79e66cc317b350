"""Run files kept gzipped (<run>.jsonl.gz), loaded through a temporary folder.

A study's runs (data/order/: the reference runs in a seeded random trial order) are gzipped because
the lab loads every .jsonl under data/ as its own runs, and these must not become its headline or its
picks; whoever reads them unpacks them first.
"""
from __future__ import annotations

import gzip
import shutil
import tempfile
from pathlib import Path
from typing import Optional

from dspark_lab.results.loading.load import Loaded, load

PACKED_SUFFIX = ".gz"


def unpacked(paths, folder, problems: Optional[list] = None) -> list[str]:
    """The run files `paths` as plain .jsonl under `folder` (gzipped ones unpacked there), to load. A file
    that cannot be unpacked is left out, said in `problems` when given (else the error is raised)."""
    out = []
    for p in map(Path, paths):
        if p.suffix == PACKED_SUFFIX:
            plain = Path(folder) / p.name[:-len(PACKED_SUFFIX)]
            try:
                with gzip.open(p, "rb") as src, open(plain, "wb") as dst:
                    shutil.copyfileobj(src, dst)
            except (OSError, EOFError) as e:  # not gzip, cut short, unreadable
                if problems is None:
                    raise
                problems.append(f"{p}: cannot be unpacked ({e}), skipped")
                continue
            p = plain
        out.append(str(p))
    return out


def load_packed(paths) -> Loaded:
    """The run files `paths` (gzipped or plain) loaded as run files are, without the cache (the
    unpacked copies live only as long as this call; a file that cannot be unpacked is a warning)."""
    problems: list = []
    with tempfile.TemporaryDirectory(prefix="dspark-packed-") as tmp:
        loaded = load(unpacked(paths, Path(tmp), problems), cache=False)
    loaded.warnings[:0] = problems
    return loaded
