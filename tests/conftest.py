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
