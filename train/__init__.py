"""Shared training core: data, task, loop and callbacks (imports models/quant, never Hydra/submitit)."""
