"""One rank's view of the group: its rank, the world size, the process group and its device.

A single process is the world-size-1 case: `RankContext.single()` has no group, so the MoE keeps
all experts and runs no collective, and the same measuring code runs unchanged.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, Callable, Optional

import torch
import torch.distributed as dist


@dataclass
class RankContext:
    rank: int
    world_size: int
    group: Any  # a torch.distributed ProcessGroup, or None for one process
    backend: str  # "nccl" | "gloo" | "none"
    device: str  # "cuda" (this rank's GPU is the current device) or "cpu"
    # Set by the worker process (parallel.workers) for each request: its number, and how to send
    # the parent a partial result before the answer (a streamed live measurement).
    request: int = 0
    emit: Optional[Callable[[Any], None]] = None

    @classmethod
    def single(cls, device: Optional[str] = None) -> "RankContext":
        dev = device or ("cuda" if torch.cuda.is_available() else "cpu")
        return cls(0, 1, None, "none", dev)

    def barrier(self) -> None:
        if self.group is not None:
            if self.backend == "nccl":
                dist.barrier(group=self.group, device_ids=[torch.cuda.current_device()])
            else:
                dist.barrier(group=self.group)

    def all_gather_object(self, obj: Any) -> list:
        if self.group is None:
            return [obj]
        out: list = [None] * self.world_size
        dist.all_gather_object(out, obj, group=self.group)
        return out

    def cancel_requested(self) -> bool:
        """The parent asked to cancel this request (WorkerGroup.cancel writes its number to a file)."""
        path = os.environ.get("DSPARK_CANCEL_FILE")
        if not path:
            return False
        try:
            with open(path) as f:
                return f.read().strip() == str(self.request)
        except OSError:
            return False

    def describe(self) -> dict:
        return {"rank": self.rank, "world_size": self.world_size, "backend": self.backend, "device": self.device,
                "pid": os.getpid(), "torch": torch.__version__, "nccl_version": nccl_version()}

    def shutdown(self) -> None:
        if self.group is not None and dist.is_initialized():
            dist.destroy_process_group()


def nccl_version() -> Optional[str]:
    """NCCL's version as "major.minor.patch" (None without CUDA)."""
    if not torch.cuda.is_available():
        return None
    try:
        v = torch.cuda.nccl.version()
    except Exception:  # noqa: BLE001
        return None
    return ".".join(map(str, v)) if isinstance(v, tuple) else str(v)


def init_rank(backend: str) -> RankContext:
    """Join the group described by RANK / WORLD_SIZE / MASTER_ADDR / MASTER_PORT."""
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    if backend == "nccl":
        torch.cuda.set_device(rank % torch.cuda.device_count())
        dist.init_process_group("nccl", rank=rank, world_size=world,
                                device_id=torch.device("cuda", torch.cuda.current_device()))
        device = "cuda"
    else:
        dist.init_process_group("gloo", rank=rank, world_size=world)
        device = "cpu"
    return RankContext(rank, world, dist.group.WORLD, backend, device)
