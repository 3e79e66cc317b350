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

from dspark_lab.results.loading.load import Loaded, load

PACKED_SUFFIX = ".gz"


def unpacked(paths, folder) -> list[str]:
    """The run files `paths` as plain .jsonl under `folder` (gzipped ones unpacked there), to load."""
    out = []
    for p in map(Path, paths):
        if p.suffix == PACKED_SUFFIX:
            plain = Path(folder) / p.name[:-len(PACKED_SUFFIX)]
            with gzip.open(p, "rb") as src, open(plain, "wb") as dst:
                shutil.copyfileobj(src, dst)
            p = plain
        out.append(str(p))
    return out


def load_packed(paths) -> Loaded:
    """The run files `paths` (gzipped or plain) loaded as run files are, without the cache (the
    unpacked copies live only as long as this call)."""
    with tempfile.TemporaryDirectory(prefix="dspark-packed-") as tmp:
        return load(unpacked(paths, Path(tmp)), cache=False)
