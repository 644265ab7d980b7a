"""``python -m analysis results``: docs/results.md, generated from run records.

One section per claim of the two studies mxsweep reproduces (and one beyond them), each with its
verdict (reproduced / partially / not reproduced / not run here), the numbers (mean ± sd where there
are seeds), a figure, the exact command that produced the records, and that command's wall time as
recorded (first run start to last run end, less any stretch in which the sweep was stopped). Nothing
is typed by hand: rerunning the commands and then this one regenerates the file. A sweep that has not
been run yet gives its section a "not run" verdict and the command to run it.

The verdict rules are stated next to each claim; the proxy's vocabulary (blew up, stable, onset) is
``analysis.proxy``'s. One module per part of the document: ``common`` (a sweep's records, the
document, the verdicts), ``presets`` (which preset plays which part), ``mechanism`` (1.1),
``from_init`` (paired from-init comparisons, 1.2–1.3), ``interventions`` (1.3), ``late`` (1.4),
``proxy_claims`` (1.1–1.4 put together), ``lm`` (1.5, 1.6, 3.1), ``blocksize`` (study 2),
``search_log`` and ``writer`` (the whole document in order).
"""

from analysis.results.writer import summary, write_results

__all__ = ["summary", "write_results"]
