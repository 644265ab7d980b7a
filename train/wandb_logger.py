"""Weights & Biases logging: a hook that mirrors the run record into one wandb run.

What is logged (``WandbLogger``, placed after ``MetricsLogger`` in ``train.hooks.default_hooks``):

* config: the fully resolved ``RunConfig`` (the same dict as ``config.yaml``), plus ``mxsweep``:
  the run's identity hash (``records.run_id``), its sweep (the group) and its nominal budget C
  (``logger.budget``, set by the sweeper);
* job_type: ``train``, or ``branch`` for a run branched from another's checkpoint;
* history: every metrics.jsonl row, with the same keys and values, at ``step`` = the training step;
* summary: summary.json, once it is written at the end of the run (status, losses, N, D, C, …);
* group: ``logger.wandb.group`` (the sweep name; none by default); tags: ``task:<task>``,
  ``precision:<label>`` (the one precision label, ``records.precision``), plus ``logger.wandb.tags``;
  name: the run directory's name.

Files: wandb writes under ``<out_dir>/wandb/``. The wandb run id is the mxsweep run id (the identity
hash), kept in ``<out_dir>/wandb/run_id.txt`` (an older run keeps the id stored there), so a resumed
or rerun run continues the same wandb run (``resume="allow"``); rows at steps wandb already has from
an earlier attempt are skipped.

Modes (``logger.wandb.mode``): ``online``; ``offline`` (nothing leaves the machine: compute nodes often
have no internet); ``disabled`` (wandb is not imported at all; what the test suite uses); ``auto``
(default): ``$WANDB_MODE`` if set, else ``online`` when an API key is configured (``WANDB_API_KEY``,
or a ``~/.netrc``/``$NETRC`` entry for the wandb host as ``wandb login`` writes), else ``offline``.
Upload offline runs later from a machine with internet access::

    wandb sync <out_dir>/wandb/offline-run-*                  # one run (every attempt of it)
    wandb sync outputs/sweeps/<sweep>/*/wandb/offline-run-*   # a whole sweep
    wandb sync -p <project> -e <entity> <dir>                 # into another project/entity

(``wandb sync --sync-all`` is gone since wandb 0.31: name the directories.) wandb prints a banner per
run; ``WANDB_SILENT=true`` silences it (the run is recorded all the same).

Under DDP only rank 0 logs. A resume may change ``logger.*`` (e.g. offline → online): the logger
section is not part of a run's identity (``records.run``).
"""

from __future__ import annotations

import dataclasses
import netrc
import os
import secrets
import string
from collections.abc import Mapping
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from records import run as record
from train.callbacks import Callback, State
from train.config import RunConfig, WandbConfig

_ENV_MODES = {
    "online": "online",
    "run": "online",
    "offline": "offline",
    "dryrun": "offline",
    "disabled": "disabled",
}
ID_FILE = "run_id.txt"


def api_key_configured(env: Mapping[str, str] | None = None) -> bool:
    """Whether wandb would find an API key: ``WANDB_API_KEY`` or a netrc entry for the wandb host."""
    env = os.environ if env is None else env
    if env.get("WANDB_API_KEY"):
        return True
    host = urlparse(env.get("WANDB_BASE_URL") or "https://api.wandb.ai").hostname
    path = env.get("NETRC") or os.path.join(env.get("HOME") or os.path.expanduser("~"), ".netrc")
    try:
        return netrc.netrc(path).authenticators(host) is not None
    except (OSError, netrc.NetrcParseError):
        return False


def resolve_mode(mode: str, env: Mapping[str, str] | None = None) -> str:
    """The wandb mode ``mode`` stands for: itself, or for ``auto`` see the module docstring."""
    if mode != "auto":
        return mode
    env = os.environ if env is None else env
    from_env = _ENV_MODES.get(env.get("WANDB_MODE", "").strip().lower())
    if from_env is not None:
        return from_env
    return "online" if api_key_configured(env) else "offline"


def precision_tags(run: RunConfig) -> list[str]:
    """``task:<task>`` and ``precision:<label>``: the run's one precision label (``RunConfig.label``,
    the same string as its directory, ``--status`` and the report); the settings themselves are in the
    run's config (``config.precision``), where wandb filters on them."""
    return [f"task:{run.task}", f"precision:{run.label}"[:64]]


def run_id(out_dir: str | Path, run: RunConfig | None = None) -> str:
    """The wandb run id of ``out_dir``: the stored one, else the mxsweep run id of ``run`` (its
    identity hash; a random one without ``run``), then stored."""
    path = Path(out_dir) / "wandb" / ID_FILE
    if path.exists():
        return path.read_text().strip()
    if run is not None:
        from records import run_id as identity_hash

        new = identity_hash(run)
    else:
        new = "".join(secrets.choice(string.ascii_lowercase + string.digits) for _ in range(8))
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(new + "\n")
    return new


class WandbLogger(Callback):
    """Mirrors config, metrics.jsonl rows and summary.json into one wandb run (see the module doc)."""

    after = ("MetricsLogger",)  # it mirrors the row MetricsLogger wrote (state.row)

    def __init__(self, cfg: WandbConfig):
        self.cfg, self.run, self.first_step = cfg, None, 0
        self.mode: str | None = None

    def on_train_start(self, state: State) -> None:
        self.mode = resolve_mode(self.cfg.mode)
        if self.mode == "disabled":
            return
        import wandb

        run, out = state.run, Path(state.run.out_dir)
        self.run = wandb.init(
            project=self.cfg.project,
            entity=self.cfg.entity,
            group=self.cfg.group,
            tags=list(dict.fromkeys([*precision_tags(run), *self.cfg.tags])),
            config={
                **record._plain(dataclasses.asdict(run)),
                "mxsweep": {"run_id": run_id(out, run), "sweep": self.cfg.group, "budget": run.logger.budget},
            },
            job_type="branch" if run.train.branch_from else "train",
            name=out.name,
            dir=str(out),
            id=run_id(out, run),
            resume="allow",
            mode=self.mode,
            reinit="finish_previous",
        )
        self.first_step = self.run.step  # > 0 when resuming a run wandb already has rows of

    def on_step_end(self, state: State, metrics: dict[str, Any]) -> None:
        row = state.row
        if self.run is not None and row is not None and row["step"] >= self.first_step:
            self.run.log(row, step=row["step"])

    def on_summary(self, state: State, summary: dict[str, Any]) -> None:
        if self.run is None:
            return
        self.run.summary.update(record._plain(summary))
        self.run.finish(exit_code=1 if summary["status"] == "failed" else 0)
        self.run = None
