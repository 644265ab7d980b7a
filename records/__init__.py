"""The run directory's contract, torch-free: everything that reads or writes run records goes through
here (``train``, ``sweeper``, ``analysis``, ``quant.native``'s kernel cache). Floor 1 of the layout:
it imports nothing from the rest of mxsweep.

Today it owns the atomic write (``atomic``), standard JSON (``jsonio``) and where a branch starts
(``branching``); the run identity, the run lock, the tolerant readers and the precision label move
here next (issue 11).
"""

from records.atomic import atomic_write
from records.branching import branch_fraction, spike_branch_step
from records.jsonio import dumps, finite

__all__ = ["atomic_write", "branch_fraction", "dumps", "finite", "spike_branch_step"]
