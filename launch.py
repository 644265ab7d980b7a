"""The one entry point: ``python launch.py [overrides]`` trains one run from the Hydra configs in conf/.

    python launch.py                                   # a small byte-level LM on litmix
    python launch.py task=proxy                        # the residual-MLP proxy with its fp32 twin
    python launch.py precision.w=fp8_e4m3 precision.a=bf16 model.depth=2 train.steps=200

Hydra lives here only: the composed config becomes typed dataclasses once (``OmegaConf.to_object``,
which runs every ``__post_init__``), and everything below receives those. Bad input (unknown format,
block size < 1, depth < 1, steps < 1 …) is reported as one line on stderr with exit status 2 before
any work starts.
"""

from __future__ import annotations

import json
import sys

import hydra
from hydra.core.config_store import ConfigStore
from omegaconf import DictConfig, OmegaConf

from train.config import RunConfig
from train.data import DataConfig

ConfigStore.instance().store(name="run_schema", node=RunConfig)


def build_run(cfg: DictConfig) -> RunConfig:
    """The typed run of a composed config; raises ValueError with a one-line message on bad input."""
    try:
        run: RunConfig = OmegaConf.to_object(cfg)
        if run.task == "lm":
            data = run.data if isinstance(run.data, dict) else {}
            run.data = DataConfig(**data)
        else:
            run.data = None
        return run
    except TypeError as e:  # e.g. an unknown key added with +model.foo=1
        raise ValueError(str(e).split("\n")[0]) from None
    except Exception as e:  # OmegaConf validation errors carry the full key path in their first line
        if isinstance(e, ValueError) and "\n" not in str(e):
            raise
        raise ValueError(str(e).strip().split("\n")[0]) from None


@hydra.main(version_base="1.3", config_path="conf", config_name="config")
def main(cfg: DictConfig) -> None:
    try:
        run = build_run(cfg)
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(2)
    from train.hooks import default_hooks
    from train.loop import train
    from train.tasks import make_task

    summary = train(run, make_task(run), default_hooks(run))
    keys = ("status", "final_val_loss", "min_val_loss", "steps", "N", "D", "C", "spike_step")
    print(json.dumps({k: summary.get(k) for k in keys}))
    print(f"run record: {run.out_dir}")


if __name__ == "__main__":
    main()
