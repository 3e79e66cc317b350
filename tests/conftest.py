import atexit
import os
import shutil
import tempfile

import pytest
import torch

# The run-file cache (dspark_lab/results/cache.py) of this test session: its own folder, removed at
# exit, never the user's ~/.cache (subprocesses inherit it).
os.environ["DSPARK_CACHE"] = tempfile.mkdtemp(prefix="dspark-test-cache-")
atexit.register(shutil.rmtree, os.environ["DSPARK_CACHE"], True)


def pytest_collection_modifyitems(config, items):
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA device; this machine has none")
    for item in items:
        if "cuda" in item.keywords:
            item.add_marker(skip)
