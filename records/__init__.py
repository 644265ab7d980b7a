"""The run directory's contract, torch-free: everything that reads or writes run records goes through
here (``train``, ``sweeper``, ``analysis``, ``quant.native``'s kernel cache). Floor 1 of the layout:
it imports nothing from the rest of mxsweep.

It owns the run directory (``run``: config.yaml, metrics.jsonl, summary.json, the environment),
the atomic write (``atomic``), standard JSON (``jsonio``), the run identity (``identity``), the
tolerant readers (``readers``), the run lock (``lock``), where a branch starts (``branching``), and
the precision settings' defaults and their one label (``precision``).
"""

from records import precision
from records.atomic import DiskFull, atomic_write
from records.branching import branch_fraction, spike_branch_step
from records.identity import NOT_IDENTITY, identity, identity_of, run_id
from records.jsonio import dumps, finite
from records.readers import (
    CONFIG,
    MANIFEST,
    METRICS,
    PROBE,
    SUMMARY,
    TENSOR_ERROR,
    RecordWarning,
    read_mapping,
    read_metrics,
    read_summary,
)

__all__ = [
    "CONFIG",
    "DiskFull",
    "MANIFEST",
    "METRICS",
    "NOT_IDENTITY",
    "PROBE",
    "SUMMARY",
    "TENSOR_ERROR",
    "RecordWarning",
    "atomic_write",
    "branch_fraction",
    "dumps",
    "finite",
    "identity",
    "identity_of",
    "precision",
    "read_mapping",
    "read_metrics",
    "read_summary",
    "run_id",
    "spike_branch_step",
]
