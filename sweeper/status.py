"""Where a sweep stands: ``python -m sweeper.status <sweep_dir>`` (also ``python launch.py --status``).

A run's status comes from its directory alone: ``running`` while its job's heartbeat is fresh
(``sweeper.job``), else the record's status (``done | diverged | failed | interrupted``), else
``interrupted`` if it trained at all (metrics or checkpoints, no summary: killed hard), else
``pending``. The runs of a sweep are those of its manifest (``manifest.json``, written by the
sweeper on every launch: what was asked, skipped and launched) plus any other run directory there.
"""

from __future__ import annotations

import json
import sys
from collections import Counter
from pathlib import Path
from typing import Any

from records import atomic_write, dumps, read_summary
from sweeper.job import MARKER, is_running
from sweeper.table import format_table, loss, num, sci

STATUSES = ("done", "diverged", "failed", "interrupted", "running", "pending")
MANIFEST = "manifest.json"


def run_status(run_dir: str | Path) -> str:
    """One of ``STATUSES`` for a run directory (which need not exist)."""
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        return "pending"
    if is_running(run_dir):
        return "running"
    summary = read_summary(run_dir)
    if summary is not None and summary.get("status") in STATUSES:
        return summary["status"]
    if (run_dir / "metrics.jsonl").exists() or (run_dir / "ckpt").is_dir() or (run_dir / MARKER).exists():
        return "interrupted"
    return "pending"


def write_manifest(sweep_dir: Path, manifest: dict[str, Any]) -> None:
    sweep_dir.mkdir(parents=True, exist_ok=True)
    atomic_write(sweep_dir / MANIFEST, dumps(manifest, indent=1, default=str) + "\n")


def planned_runs(manifest: dict[str, Any]) -> list[dict[str, Any]]:
    """Every run a manifest knows: this launch's ``runs``, then the ``earlier`` launches' runs that
    this one did not plan again (the manifest accumulates over relaunches)."""
    runs = [r for r in manifest.get("runs") or [] if isinstance(r, dict) and isinstance(r.get("name"), str)]
    names = {r["name"] for r in runs}
    earlier = manifest.get("earlier") or []
    return runs + [r for r in earlier if isinstance(r, dict) and r.get("name") not in names]


def read_manifest(sweep_dir: str | Path) -> dict[str, Any] | None:
    try:
        return json.loads((Path(sweep_dir) / MANIFEST).read_text())
    except (OSError, ValueError):
        return None


def _is_run_dir(path: Path) -> bool:
    return path.is_dir() and any(
        (path / f).exists() for f in ("config.yaml", "summary.json", MARKER, ".hydra")
    )


def scan(sweep_dir: str | Path) -> list[dict[str, Any]]:
    """One row per run of the sweep: name, status, progress, losses and the manifest's coordinates."""
    sweep_dir = Path(sweep_dir)
    manifest = read_manifest(sweep_dir) or {}
    planned = {r["name"]: r for r in planned_runs(manifest)}
    names = list(planned)
    names += sorted(
        p.name
        for p in sweep_dir.iterdir()
        if p.name not in planned and not p.name.startswith(".") and _is_run_dir(p)  # not .hydra, .submitit
    )
    rows = []
    for name in names:
        run_dir = sweep_dir / name
        summary = read_summary(run_dir) or {}
        coords = planned.get(name, {}).get("coords", {})
        rows.append(
            {
                "name": name,
                "status": run_status(run_dir),
                "step": summary.get("step", _last_step(run_dir)),
                "steps": summary.get("steps", coords.get("steps")),
                "final_val_loss": summary.get("final_val_loss"),
                "spike_step": summary.get("spike_step"),
                **{k: v for k, v in coords.items() if k not in ("steps",)},
            }
        )
    return rows


def _last_step(run_dir: Path) -> int | None:
    path = run_dir / "metrics.jsonl"
    try:
        with open(path, "rb") as f:
            f.seek(max(0, path.stat().st_size - 4096))
            lines = f.read().decode(errors="replace").strip().splitlines()
        return json.loads(lines[-1]).get("step") if lines else None
    except (OSError, ValueError, IndexError):
        return None


def counts(rows: list[dict[str, Any]]) -> dict[str, int]:
    c = Counter(r["status"] for r in rows)
    return {s: c.get(s, 0) for s in STATUSES}


def counts_line(c: dict[str, int]) -> str:
    return f"{sum(c.values())} runs: " + ", ".join(f"{s} {c[s]}" for s in STATUSES)


def report(sweep_dir: str | Path) -> str:
    """The counts line and one table row per run (coordinates from the manifest when known)."""
    rows = scan(sweep_dir)
    headers = ["run", "status", "precision", "C", "d", "L", "step", "val_loss", "spike"]
    table = [
        [
            r["name"],
            r["status"],
            r.get("precision", "-"),
            sci(r.get("C")),
            num(r.get("d")),
            num(r.get("L")),
            f"{num(r['step'])}/{num(r['steps'])}",
            loss(r["final_val_loss"]),
            num(r["spike_step"]),
        ]  # fmt: skip
        for r in rows
    ]
    text = [f"sweep {Path(sweep_dir)}", counts_line(counts(rows))]
    if rows:
        text.append(format_table(headers, table, left=("run", "status", "precision")))
    return "\n".join(text)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1 or argv[0].startswith("-"):
        print("usage: python -m sweeper.status <sweep_dir>   (e.g. outputs/sweeps/smoke)", file=sys.stderr)
        return 2
    sweep_dir = Path(argv[0])
    if not sweep_dir.is_dir():
        print(f"error: {sweep_dir} is not a directory; pass a sweep directory such as outputs/sweeps/<name>",
              file=sys.stderr)  # fmt: skip
        return 2
    print(report(sweep_dir))
    return 0


if __name__ == "__main__":
    sys.exit(main())
