"""mxsweep's Hydra sweeper plugin (``hydra/sweeper=mxsweep``); the work lives in ``sweeper/``."""
