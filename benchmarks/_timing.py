"""Interleaved wall-clock timing shared by the benchmark scripts, and the machine it ran on.

Every variant ("case") is a zero-argument callable. After an untimed-for-the-table warm-up
(``warm_up``: compilation, allocator caches, lazy init), ``round_robin`` times all cases in turn,
round after round, so drifting load on a shared machine hits every case alike; ``stats`` / ``stats_ms``
reduce one case's samples to median, min and max (compare medians; the minimum is the least
disturbed round).
"""

from __future__ import annotations

import platform
import statistics
import sys
import time
from collections.abc import Callable, Mapping
from pathlib import Path

import records.run

Case = Callable[[], object]
# Called after each round with the round number (1-based) and all samples so far.
RoundReport = Callable[[int, dict[str, list[float]]], None]


def timed(fn: Case, calls: int = 1) -> float:
    """Seconds per call of ``fn``, averaged over ``calls`` back-to-back calls.

    The last call's result is released only after the clock stops, so a single timed call does
    not include freeing its (possibly large) result; earlier results are dropped as they come.
    """
    if calls < 1:
        raise ValueError(f"calls must be >= 1, got {calls}")
    t0 = time.perf_counter()
    for _ in range(calls - 1):
        fn()
    out = fn()
    dt = time.perf_counter() - t0
    del out
    return dt / calls


def warm_up(cases: Mapping[str, Case], calls: int = 2) -> dict[str, list[float]]:
    """Call each case ``calls`` times in a row (case after case); returns each call's seconds.

    The first call includes compile time for torch.compile'd code; later ones settle allocator
    caches and any lazy initialisation.
    """
    return {k: [timed(fn) for _ in range(calls)] for k, fn in cases.items()}


def _tty_progress(rounds: int) -> RoundReport:
    def report(done: int, times: dict[str, list[float]]) -> None:
        if sys.stderr.isatty():
            print(f"  round {done}/{rounds} done", end="\r", file=sys.stderr, flush=True)

    return report


def round_robin(
    cases: Mapping[str, Case],
    rounds: int,
    *,
    calls: int = 1,
    report: RoundReport | None = None,
) -> dict[str, list[float]]:
    """Time all cases interleaved, ``rounds`` times each; returns seconds per case, one per round.

    Each sample is ``timed(fn, calls)`` (seconds per call). ``report`` is called after every round;
    by default a progress line goes to stderr when it is a terminal.
    """
    report = report or _tty_progress(rounds)
    times: dict[str, list[float]] = {k: [] for k in cases}
    for r in range(rounds):
        for k, fn in cases.items():
            times[k].append(timed(fn, calls))
        report(r + 1, times)
    return times


def stats(ts: list[float], scale: float = 1.0) -> dict[str, float]:
    """Median, min and max of samples ``ts``, each sample multiplied by ``scale`` first."""
    xs = [t * scale for t in ts]
    return {"median": statistics.median(xs), "min": min(xs), "max": max(xs)}


def stats_ms(ts: list[float]) -> dict[str, float]:
    """``stats`` of samples in seconds, in milliseconds."""
    return stats(ts, 1e3)


def cpu_model() -> str:
    """The CPU's model name, as run records name it (``records.run.cpu_model``), else the machine."""
    return records.run.cpu_model() or platform.machine()


def load_average() -> str:
    try:
        return " ".join(Path("/proc/loadavg").read_text().split()[:3])
    except OSError:
        return "n/a"
