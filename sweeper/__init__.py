"""Sweeps: a precision × compute-budget study from one command, run anywhere, resumable, idempotent.

    python launch.py -m experiment=precision_grid                      # run (or resume) a study
    python launch.py -m experiment=paper_llm sweep.dry_run=true        # preview: table + count
    python launch.py -m experiment=smoke hydra/launcher=slurm          # the same on a cluster
    python launch.py --status outputs/sweeps/precision_grid            # where it stands

Layout (Hydra only in the plugin and ``config.to_run_config``; the rest is plain Python):

* ``budget``   — compute budget → steps, the one tested function (C = 6·N·D, ratio window, warm-up);
* ``config``   — the ``budget`` and ``sweep`` schemas and the root ``LaunchConfig``;
* ``grid``     — one composed base run × axes → ``PlannedRun``s (typed run, identity, directory,
  job overrides); the branch phase;
* ``identity`` — run id = short hash of the training config (not launcher, logging or paths);
* ``sweep``    — skip rule, dry-run table, manifest, phase-by-phase launch, progress, final report;
* ``status``   — run and sweep status from the run directories (``python -m sweeper.status``);
* ``job``      — the job side in ``launch.py``: no-op when finished, heartbeat, signal hand-back
  (requeue under submitit);
* ``hydra_plugins/mxsweep_sweeper`` — the Hydra ``Sweeper`` (``hydra/sweeper=mxsweep``).

What a job needs from any launcher: the overrides it is given (they include an absolute
``out_dir`` and the planned ``sweep.run_id``), the repository's ``launch.py`` importable, and for
requeue on SLURM ``max_num_timeout`` > 0 with ``signal_delay_s`` longer than one training step plus a
checkpoint (``conf/hydra/launcher/slurm.yaml``).
"""
