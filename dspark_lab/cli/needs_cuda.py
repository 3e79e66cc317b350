"""A job that measures on a CUDA GPU, asked for on a machine without one: one line that says so and
names the CPU path where there is one, the status that says nothing could be measured here, and no
run file (a CPU run in data/runs/ would stand beside the GPU runs in every view)."""
from __future__ import annotations

from dspark_lab.cli.exits import EXIT_NOT_CHECKED
from dspark_lab.cli.terminal import err


def cuda_available() -> bool:
    import torch  # here, not at the top: the parser is built without torch

    return torch.cuda.is_available()


def refuse(command: str, cpu_path: str) -> int:
    """Say that `command` needs CUDA (and how to run it on the CPU instead); EXIT_NOT_CHECKED."""
    import torch

    err(f"{command} needs a CUDA GPU and this machine has none (torch {torch.__version__}): nothing measured, "
        f"no run file written; {cpu_path}")
    return EXIT_NOT_CHECKED
