"""Multi-process training (DDP): who am I, the process group, and the few collectives the loop needs.

Launch with ``torchrun`` (it sets ``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``, ``MASTER_ADDR/PORT``)::

    torchrun --standalone --nproc_per_node=2 launch.py train.batch_size=16 ...

``--standalone`` picks a free port on localhost, so concurrent jobs on one machine do not collide.
Under SLURM without torchrun, export those variables first (e.g. submitit's
``helpers.TorchDistributedEnvironment().export()``). With ``WORLD_SIZE`` unset or 1 everything here is
a no-op and training is single-process.

Division of labour (``train.loop``): every rank builds the same model from the same seed, converts it
(``quant.convert``) and wraps it in ``DistributedDataParallel``; rank r trains on rows
``[r·B/W, (r+1)·B/W)`` of the global batch B (``train.data.make_batches(..., rank=, world_size=)``), so
the averaged gradient is the global batch's. Logged losses are averaged over ranks; evaluation runs on
every rank's validation shard and is averaged. Only rank 0 writes the run record, checkpoints and wandb.
Backend: gloo on CPU, nccl on CUDA (one GPU per rank: ``cuda`` means ``cuda:<LOCAL_RANK>``).

"Who am I" (``rank``, ``world_size``, ``is_main``, ``resolve_device``) reads torchrun's environment
until a process group exists, and needs no torch: config validation and sweep planning, which ask it,
never import torch. A process group can only exist once ``torch.distributed`` is imported.
"""

from __future__ import annotations

import contextlib
import datetime
import os
import sys
from types import ModuleType
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

TIMEOUT = datetime.timedelta(minutes=10)
"""How long a collective may wait for a missing rank before the job fails (instead of hanging)."""


def _group() -> ModuleType | None:
    """``torch.distributed`` when this process is in a process group, else None (single-process, or
    torch not imported at all: then no group can exist)."""
    dist = sys.modules.get("torch.distributed")
    return dist if dist is not None and dist.is_available() and dist.is_initialized() else None


def rank() -> int:
    dist = _group()
    return dist.get_rank() if dist else int(os.environ.get("RANK", "0"))


def world_size() -> int:
    dist = _group()
    return dist.get_world_size() if dist else int(os.environ.get("WORLD_SIZE", "1"))


def local_rank() -> int:
    return int(os.environ.get("LOCAL_RANK", "0"))


def is_main() -> bool:
    return rank() == 0


def resolve_device(device: str) -> str:
    """``cuda`` under DDP is this rank's GPU, ``cuda:<LOCAL_RANK>``; anything else is unchanged."""
    return f"cuda:{local_rank()}" if device == "cuda" and world_size() > 1 else device


def setup(device: str) -> bool:
    """Initialise the process group when ``WORLD_SIZE > 1`` (once). True if this call created it, so
    the caller should ``teardown`` it."""
    if world_size() <= 1 or _group():
        return False
    import torch
    import torch.distributed as dist

    cuda = device.startswith("cuda")
    if cuda:
        torch.cuda.set_device(torch.device(resolve_device(device)))
    dist.init_process_group("nccl" if cuda else "gloo", timeout=TIMEOUT)
    return True


def teardown() -> None:
    if dist := _group():
        dist.destroy_process_group()


def _device(dist: ModuleType) -> torch.device:
    """Where collective tensors live: the current GPU for nccl, else the CPU."""
    import torch

    if dist.get_backend() == "nccl":
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def mean(value: torch.Tensor | float) -> float:
    """The mean over ranks of a scalar (itself when single-process)."""
    if not (dist := _group()):
        return float(value)
    import torch

    t = torch.as_tensor(value, dtype=torch.float64).detach().reshape(1).to(_device(dist))
    dist.all_reduce(t)
    return float(t.item()) / dist.get_world_size()


def any_rank(flag: bool) -> bool:
    """True on every rank if ``flag`` is true on any rank (e.g. a signal that reached only one)."""
    if not (dist := _group()):
        return bool(flag)
    import torch

    t = torch.tensor([1 if flag else 0], dtype=torch.int32, device=_device(dist))
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return bool(t.item())


def broadcast(obj: object) -> object:
    """Rank 0's ``obj`` on every rank (a picklable object)."""
    if not (dist := _group()):
        return obj
    box = [obj]
    dist.broadcast_object_list(box, src=0, device=_device(dist))
    return box[0]


def barrier() -> None:
    if dist := _group():
        if dist.get_backend() == "nccl":
            import torch

            dist.barrier(device_ids=[torch.cuda.current_device()])
        else:
            dist.barrier()


def autocast(run: Any) -> contextlib.AbstractContextManager:
    """The forward-pass context of ``run``: bf16 autocast on its device, or nothing."""
    if run.train.autocast == "none":
        return contextlib.nullcontext()
    import torch

    return torch.autocast(torch.device(run.train.device).type, dtype=torch.bfloat16)
