"""Read a W&B offline run (``run-<id>.wandb``) back without network, for tests (wandb 0.31).

From ../shared/notes/slurm-wandb-ddp-local.md §3.2 (verified there on runs of 5 to 3000 steps). The
file is LevelDB-log framed: a 7-byte header (``:W&B``, magic 0xBEE1, version 0), then 32 KiB blocks of
records ``[crc32 u32][len u16][type u8][data]`` (type 1 full, 2 first, 3 middle, 4 last); each
reassembled payload is a ``wandb_internal_pb2.Record``. Uses wandb's internal protobufs, so it is
tied to the wandb version the project pins.
"""

from __future__ import annotations

import json
import struct
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from wandb.proto import wandb_internal_pb2 as pb

BLOCK, HEADER = 32768, 7


def iter_payloads(path: str | Path) -> Iterator[bytes]:
    data = Path(path).read_bytes()
    ident, magic, version = struct.unpack("<4sHB", data[:HEADER])
    assert ident == b":W&B" and magic == 0xBEE1 and version == 0, (ident, magic, version)
    pos, buf = HEADER, b""
    while pos + HEADER <= len(data):
        left = BLOCK - pos % BLOCK
        if left < HEADER:  # block trailer padding
            pos += left
            continue
        crc, length, rtype = struct.unpack("<IHB", data[pos : pos + HEADER])
        pos += HEADER
        chunk = data[pos : pos + length]
        pos += length
        if rtype == 0 and length == 0:  # zero padding
            continue
        if len(chunk) < length or zlib.crc32(chunk, zlib.crc32(bytes([rtype]))) & 0xFFFFFFFF != crc:
            raise ValueError(f"corrupt/truncated record at byte {pos - length - HEADER} of {path}")
        if rtype == 1:
            yield chunk
        elif rtype == 2:
            buf = chunk
        elif rtype == 3:
            buf += chunk
        elif rtype == 4:
            yield buf + chunk
            buf = b""


def _key(item: Any) -> str:
    return item.key or "/".join(item.nested_key)


def read_run(path: str | Path) -> dict[str, Any]:
    """``{"run_id", "project", "group", "tags", "name", "resumed", "config", "history", "summary"}``."""
    out: dict[str, Any] = {"config": {}, "history": [], "summary": {}}
    for payload in iter_payloads(path):
        rec = pb.Record()
        rec.ParseFromString(payload)
        kind = rec.WhichOneof("record_type")
        if kind == "run":
            r = rec.run
            out.update(
                run_id=r.run_id, project=r.project, group=r.run_group, tags=list(r.tags),
                name=r.display_name, resumed=r.resumed, job_type=r.job_type,
            )  # fmt: skip
            for item in r.config.update:
                out["config"][item.key] = json.loads(item.value_json)
        elif kind == "config":
            for item in rec.config.update:
                out["config"][item.key] = json.loads(item.value_json)
        elif kind == "history":
            out["history"].append({_key(i): json.loads(i.value_json) for i in rec.history.item})
        elif kind == "summary":
            for item in rec.summary.update:
                out["summary"][_key(item)] = json.loads(item.value_json)
    out["config"].pop("_wandb", None)
    return out


def offline_runs(root: str | Path) -> list[Path]:
    """The ``run-*.wandb`` files under ``<root>/wandb/offline-run-*``, oldest first."""
    return sorted(Path(root).glob("wandb/offline-run-*/run-*.wandb"))
