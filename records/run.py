"""The run directory: a self-describing record of one run.

    <out_dir>/config.yaml    the fully resolved RunConfig (dataclasses.asdict → OmegaConf YAML)
    <out_dir>/metrics.jsonl  one JSON object per logged step (appended; truncated back to the
                             checkpoint step on resume, so a resumed run has no duplicate lines)
    <out_dir>/summary.json   status (done | diverged | failed | interrupted), losses, N, D, C,
                             precision, spike, timings, versions and git revision; written atomically
    <out_dir>/ckpt/          checkpoints (``train.checkpoint``)

A run whose summary is final (``done`` or ``diverged``) is never silently overwritten: ``prepare``
raises unless ``overwrite=True``, which clears the directory first. A run directory holding a
different config is refused too, so a resume can never mix two configurations; "different" is
``records.identity``'s one definition (where the run is written and watched is not part of it, so a
copied or moved sweep resumes). Reading records is ``records.readers``' (tolerant) job.

With DDP only rank 0 writes here (``train.loop``).
"""

from __future__ import annotations

import dataclasses
import json
import platform
import shutil
import subprocess
import sys
from importlib import metadata
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf

from records.atomic import atomic_write
from records.identity import identity_of
from records.jsonio import dumps
from records.lock import MARKER
from records.readers import read_metrics, read_summary

FINAL = ("done", "diverged")
TIMINGS = ("step_time", "twin_time")
"""metrics.jsonl keys that are wall-clock measurements: they differ between otherwise identical runs."""


def config_yaml(run: Any) -> str:
    """The resolved config as YAML text."""
    return OmegaConf.to_yaml(OmegaConf.create(_plain(dataclasses.asdict(run))))


def _plain(x: Any) -> Any:
    if isinstance(x, dict):
        return {str(k): _plain(v) for k, v in x.items()}
    if isinstance(x, list | tuple):
        return [_plain(v) for v in x]
    if dataclasses.is_dataclass(x) and not isinstance(x, type):
        return _plain(dataclasses.asdict(x))
    if x is None or isinstance(x, bool | int | float | str):
        return x
    return str(x)


OVERWRITE_HINT = "choose another out_dir, or add overwrite=true to replace it"


def conflict(run_dir: str | Path, run: Any) -> str | None:
    """Why ``run`` cannot be written into ``run_dir`` (one line), or None: the directory holds a
    finished run (any config: a finished record is never silently redone), or an unfinished run of
    another config (a resume must not mix two)."""
    out = Path(run_dir)
    summary = read_summary(out)
    if summary is not None and summary.get("status") in FINAL:
        same = _same(out, run)
        what = "this run, finished" if same else "a finished run of another config"
        return f"{out} already holds {what} (status {summary['status']})"
    if (out / "config.yaml").exists() and not _same(out, run):
        return f"{out} holds an unfinished run of another config"
    return None


def _same(out: Path, run: Any) -> bool:
    try:
        return _identity((out / "config.yaml").read_text()) == _identity(config_yaml(run))
    except (OSError, ValueError):
        return False


def prepare(run_dir: str | Path, run: Any, overwrite: bool = False) -> None:
    """Create (or re-open for resume) ``run_dir`` and write ``config.yaml``; ``overwrite`` clears
    the directory first. Refuses (``FileExistsError``, one line) what ``conflict`` names."""
    out = Path(run_dir)
    if overwrite and out.exists():
        for p in out.iterdir():  # everything but the run lock, which this process holds
            if p.name != MARKER:
                shutil.rmtree(p) if p.is_dir() and not p.is_symlink() else p.unlink()
    elif (why := conflict(out, run)) is not None:
        raise FileExistsError(f"{why}; {OVERWRITE_HINT}")
    out.mkdir(parents=True, exist_ok=True)
    atomic_write(out / "config.yaml", config_yaml(run))


def _identity(text: str) -> dict[str, Any]:
    """The identity (``records.identity_of``) of a config.yaml's text: what a resume must match.
    Where the run is written and watched is not part of it, so a copied or moved sweep resumes."""
    return identity_of(OmegaConf.to_container(OmegaConf.create(text)))


def append_metrics(run_dir: str | Path, row: dict[str, Any]) -> None:
    with open(Path(run_dir) / "metrics.jsonl", "a") as f:
        f.write(dumps(row) + "\n")


def truncate_metrics(run_dir: str | Path, step: int) -> None:
    """Drop logged lines beyond ``step`` (and any torn last line), e.g. when resuming from step."""
    path = Path(run_dir) / "metrics.jsonl"
    if not path.exists():
        return
    keep = []
    for line in path.read_text().splitlines():
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            continue
        if row.get("step", 0) <= step:
            keep.append(line)
    atomic_write(path, "".join(line + "\n" for line in keep))


def write_summary(run_dir: str | Path, summary: dict[str, Any]) -> None:
    atomic_write(Path(run_dir) / "summary.json", dumps(summary, indent=2, default=str) + "\n")


def environment() -> dict[str, Any]:
    """Versions and the git revision (with a dirty flag) of the code that ran, and the hardware."""
    return {
        "versions": {
            "torch": _version("torch"),
            "python": platform.python_version(),
            "mxsweep": _version("mxsweep"),
        },
        "git": _git(),
        "hardware": hardware(),
    }


def hardware() -> dict[str, Any]:
    """What besides the code decides a run's fp32 rounding: torch picks its CPU kernels by the vector
    ISA it finds (``cpu_capability``: AVX2 and AVX-512 GEMMs sum in different orders) and splits
    reductions by ``threads``. The same config and seed is bit-identical only where both agree; a
    chaotic run (the proxy near its stability edge) can end elsewhere from a 1e-7 difference. Read from
    torch only if the run imported it (this module stays torch-free)."""
    hw: dict[str, Any] = {"machine": platform.machine(), "cpu": cpu_model()}
    torch = sys.modules.get("torch")
    if torch is not None:
        hw["cpu_capability"] = torch.backends.cpu.get_cpu_capability()
        hw["threads"] = torch.get_num_threads()
        if torch.cuda.is_initialized():  # naming the GPU must not start CUDA in a CPU run
            hw["cuda"] = torch.cuda.get_device_name()
    return hw


def cpu_model() -> str | None:
    """The CPU's model name (Linux: /proc/cpuinfo). The ISA alone does not pin the bits: the proxy's
    seed 16 ended 0.043 on an AMD EPYC and 0.062 on an Intel Xeon, both AVX-512, same config and seed
    (docs/results.md: which seeds blow up is a chance event)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or None


def _version(package: str) -> str | None:
    """The installed version (torch's own ``__version__`` once imported: it carries the build, +cpu)."""
    module = sys.modules.get(package)
    if module is not None and isinstance(getattr(module, "__version__", None), str):
        return str(module.__version__)
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return None


def _git() -> dict[str, Any]:
    root = Path(__file__).resolve().parent.parent
    try:
        rev = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True, timeout=10
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            cwd=root,
            capture_output=True,
            text=True,
            timeout=10,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return {"revision": None, "dirty": None}
    return {"revision": rev or None, "dirty": bool(dirty) if rev else None}


__all__ = [
    "FINAL",
    "TIMINGS",
    "append_metrics",
    "config_yaml",
    "environment",
    "hardware",
    "prepare",
    "read_metrics",
    "read_summary",
    "truncate_metrics",
    "write_summary",
]
