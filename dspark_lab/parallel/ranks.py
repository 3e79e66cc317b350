"""One rank's view of the group: its rank, the world size, the process group and its device.

A single process is the world-size-1 case: `RankContext.single()` has no group, so the MoE keeps
all experts and runs no collective, and the same measuring code runs unchanged.

Both launchers join through `init_rank`: the single-host WorkerGroup (parallel/workers.py) and
torchrun (parallel/torchrun.py). Each rank takes RANK / WORLD_SIZE / MASTER_ADDR / MASTER_PORT
from its environment, and LOCAL_RANK / GROUP_RANK (its node's rank) where torchrun sets them; its
GPU is the one at LOCAL_RANK.
"""
from __future__ import annotations

import os
import socket
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, Callable, Optional

import torch
import torch.distributed as dist

from dspark_lab.config import DEFAULT_TIMEOUT_S


@dataclass
class RankContext:
    rank: int
    world_size: int
    group: Any  # a torch.distributed ProcessGroup, or None for one process
    backend: str  # "nccl" | "gloo" | "none"
    device: str  # "cuda" (this rank's GPU is the current device) or "cpu"
    local_rank: int = 0  # rank on its node (torchrun's LOCAL_RANK); picks the GPU
    node_rank: int = 0  # its node's rank (torchrun's GROUP_RANK); 0 on one host
    node: str = field(default_factory=socket.gethostname)  # its host's name
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
                "local_rank": self.local_rank, "node_rank": self.node_rank, "node": self.node, "pid": os.getpid(), "torch": torch.__version__, "nccl_version": nccl_version()}

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


def env_int(name: str, default, minimum: int) -> int:
    """The integer environment variable `name` (`default` when unset), or ValueError naming it."""
    text = os.environ.get(name)
    if text is None and default is not None:
        return default
    try:
        value = int(str(text).strip())
    except ValueError:
        raise ValueError(f"{name}={str(text)[:40]!r} is not an integer (the launcher sets it: an integer "
                         f">= {minimum})") from None
    if value < minimum:
        raise ValueError(f"{name}={value} is out of range (an integer >= {minimum})")
    return value


def init_rank(backend: str, timeout_s: float = DEFAULT_TIMEOUT_S) -> RankContext:
    """Join the group described by RANK / WORLD_SIZE / MASTER_ADDR / MASTER_PORT (and LOCAL_RANK /
    GROUP_RANK where set). A rank that cannot join within `timeout_s` fails naming the endpoint."""
    env = os.environ
    world = env_int("WORLD_SIZE", None, 1)
    rank = env_int("RANK", None, 0)
    if rank >= world:
        raise ValueError(f"RANK={rank} is not below WORLD_SIZE={world} (ranks are 0 to WORLD_SIZE-1)")
    local_rank, node_rank = env_int("LOCAL_RANK", rank, 0), env_int("GROUP_RANK", 0, 0)
    timeout = timedelta(seconds=timeout_s)
    try:
        if backend == "nccl":
            if local_rank >= torch.cuda.device_count():
                raise ValueError(f"LOCAL_RANK {local_rank} has no GPU: this node has {torch.cuda.device_count()} "
                                 "(--nproc-per-node must be at most the GPUs per node)")
            torch.cuda.set_device(local_rank)
            dist.init_process_group("nccl", rank=rank, world_size=world, timeout=timeout,
                                    device_id=torch.device("cuda", local_rank))
            device = "cuda"
        else:
            dist.init_process_group("gloo", rank=rank, world_size=world, timeout=timeout)
            device = "cpu"
    except ValueError:
        raise
    except Exception as e:  # noqa: BLE001 - re-raised with the endpoint named
        endpoint = f"{env.get('MASTER_ADDR', '?')}:{env.get('MASTER_PORT', '?')}"
        raise RuntimeError(f"rank {rank} of {world} could not join the process group at {endpoint} "
                           f"(MASTER_ADDR:MASTER_PORT) within {timeout_s:g} s: {type(e).__name__}: {e}") from e
    return RankContext(rank, world, dist.group.WORLD, backend, device, local_rank, node_rank)
