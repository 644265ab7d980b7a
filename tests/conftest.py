"""Fixtures shared by the whole test suite.

* ``eager_backend`` (autouse): every test runs on the eager quantizer, the bit-exact reference;
  compiling one graph per spec would cost far more than the suite's small tensors save. Tests
  marked ``compile`` (tests/quant/test_compiled.py) exercise the torch.compile path and pick
  their backend themselves; the fixture only restores it afterwards.
* ``one_thread`` (opt in: ``pytestmark = pytest.mark.usefixtures("one_thread")`` or a fixture
  argument): torch on one thread, for modules of tiny tensors where more threads only add
  overhead and contend on a busy small box.

Both restore what they changed after each test. Subprocess-based tests set ``OMP_NUM_THREADS=1``
and the native quantizer (bit-identical to eager) in the child's environment instead
(``tests/launching.py``).

The longest files run first (``pytest_collection_modifyitems``, with ``--no-loadscope-reorder`` in
scripts/test.sh): under ``--dist loadfile`` a file runs whole on one worker, and xdist's default order
(most tests first) started the few-but-slow files (faults, ddp, benchmarks, slurm) last, leaving the
other worker idle at the end. Longest first keeps both busy to the end (LPT scheduling).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import torch

import quant

LONGEST_FIRST = (  # per-file totals of `--durations=0` on 2 cores, longest first (a hint: stale is harmless)
    "test_sweeper.py",
    "test_presets.py",
    "quant/test_compiled.py",
    "test_slurm.py",
    "test_launch.py",
    "test_records.py",
    "test_analysis.py",
    "test_proxy_analysis.py",
    "test_bad_input.py",
    "faults/test_kill.py",
    "test_ddp.py",
    "quant/test_mx.py",
    "test_train.py",
    "test_benchmarks.py",
)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Order files longest first (``LONGEST_FIRST``, then the rest as collected); a file's own tests
    keep their order (the sort is stable)."""
    rank = {name: i for i, name in enumerate(LONGEST_FIRST)}
    tests = config.rootpath / "tests"

    def key(item: pytest.Item) -> int:
        try:
            name = item.path.relative_to(tests).as_posix()
        except ValueError:
            return len(rank)
        return rank.get(name, len(rank))

    items.sort(key=key)


@pytest.fixture(autouse=True)
def eager_backend(request: pytest.FixtureRequest) -> Iterator[None]:
    """Force the eager quantizer backend for one test; tests marked ``compile`` choose their own,
    and it is restored after them too."""
    marked = request.node.get_closest_marker("compile") is not None
    with quant.use_backend(quant.get_backend() if marked else "eager"):
        yield


@pytest.fixture
def one_thread() -> Iterator[None]:
    """Run torch on one thread for one test."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)
