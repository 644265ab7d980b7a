"""``python -m analysis report <sweep_dir> [--out DIR]``, ``python -m analysis collect <sweep_dir>`` and
``python -m analysis results [--root outputs] [--out docs/results.md]`` (the reproduction document)."""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence
from pathlib import Path


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m analysis", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    rep = sub.add_parser("report", help="write report.md, results.parquet, fits.json and figures/")
    rep.add_argument("sweep_dir", type=Path, nargs="+", help="one or more sweep directories")
    rep.add_argument("--out", type=Path, default=None, help="output directory (default: the sweep dir; "
                     "required for several)")  # fmt: skip
    rep.add_argument("--loss", default="final_val_loss", help="loss column to fit (or min_val_loss)")
    rep.add_argument("--bootstrap", type=int, default=100, help="bootstrap resamples per fit (0: none)")
    rep.add_argument("--seed", type=int, default=0)
    col = sub.add_parser("collect", help="write results.parquet/.csv and curves.parquet only")
    col.add_argument("sweep_dir", type=Path)
    col.add_argument("--out", type=Path, default=None)
    res = sub.add_parser("results", help="regenerate docs/results.md from the records under --root")
    res.add_argument("--root", type=Path, default=Path("outputs"), help="where the commands wrote records")
    res.add_argument("--out", type=Path, default=Path("docs/results.md"))
    args = parser.parse_args(argv)
    if args.command == "results":
        from analysis.results import summary, write_results

        t0 = time.perf_counter()
        path = write_results(args.root, args.out)
        verdicts = summary(path)
        for title, verdict in verdicts.items():
            print(f"  {verdict:22s} {title}")
        print(f"results: {path} ({time.perf_counter() - t0:.1f}s)")
        return 0
    dirs = args.sweep_dir if isinstance(args.sweep_dir, list) else [args.sweep_dir]
    missing = [d for d in dirs if not d.is_dir()]
    if missing:
        print(f"error: {missing[0]} is not a directory", file=sys.stderr)
        return 2
    t0 = time.perf_counter()
    if args.command == "report":
        from analysis.report import write_report

        if len(dirs) > 1 and args.out is None:
            print("error: a report over several sweeps needs --out DIR (it belongs to none of them)",
                  file=sys.stderr)  # fmt: skip
            return 2
        path = write_report(dirs, args.out, loss=args.loss, bootstrap=args.bootstrap, seed=args.seed)
        print(f"report: {path} ({time.perf_counter() - t0:.1f}s)")
        return 0
    from analysis.collect import collect, curves, export, parquet_safe

    out = args.out or args.sweep_dir
    df = collect(args.sweep_dir)
    pq, csv = export(df, out / "results")
    cur = curves(args.sweep_dir, df)
    parquet_safe(cur).to_parquet(out / "curves.parquet", index=False)
    print(f"{len(df)} runs → {pq}, {csv}; {len(cur)} curve rows → {out / 'curves.parquet'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
