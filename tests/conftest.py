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
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import torch

import quant

LONGEST_FIRST = (
    "test_sweeper.py",
    "test_presets.py",
    "test_slurm.py",
    "test_records.py",
    "test_launch.py",
    "test_ddp.py",
    "test_proxy_analysis.py",
    "test_analysis.py",
)
"""The files that take minutes, longest first (``--durations`` on 2 cores: 1-5 min each, against
seconds for most others). scripts/test.sh runs 2 workers with ``--dist loadfile``, one whole file
per worker at a time, handed out in collection order (``--no-loadscope-reorder``; xdist's default
hands out the files with the most tests first, fast unit-test files, and the few-test SLURM file near
the end): a long file handed out last keeps one worker busy for minutes after the other has run out
of files (~2 of the suite's 11 minutes on a machine without AVX-512). Starting them first leaves the
short files to even out the end."""


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    rank = {name: i for i, name in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))  # stable: the rest keep their order


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
