"""`python -m experiments.overfit run | work | report`: see the package docstring."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from . import __doc__ as DOC
from .jobs import SEEDS, SETTINGS, build_jobs


def _setting(item: str) -> tuple[str, object]:
    key, _, value = item.partition("=")
    if key not in SETTINGS:
        raise argparse.ArgumentTypeError(f"unknown setting {key!r}; known: {sorted(SETTINGS)}")
    return key, type(SETTINGS[key])(value)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m experiments.overfit", description=(DOC or "").split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    for name in ("run", "work"):
        p = sub.add_parser(name, help="train and evaluate every run" + (" (one process)" if name == "work" else ""))
        p.add_argument("--out", default="runs/overfit")
        p.add_argument("--seeds", type=int, nargs="+", default=list(SEEDS))
        p.add_argument("--no-sensitivity", action="store_true", help="the 12 core runs only")
        p.add_argument("--set", action="append", default=[], type=_setting, metavar="KEY=VALUE", help="a SETTINGS key")
        p.add_argument("--train-file", default=None, help="another text instead of Tiny Shakespeare (tests)")
        if name == "run":
            p.add_argument("--workers", type=int, default=2, help="processes, one thread each")
    p = sub.add_parser("timing", help="s/step of every model, back to back in one process (OUT/timing.json)")
    p.add_argument("--out", default="runs/overfit")
    p = sub.add_parser("report", help="tables and figures from the raw results")
    p.add_argument("--out", default="runs/overfit")
    p.add_argument("--from", dest="source", default=None, help="a combined overfit.json instead of OUT/raw")
    p.add_argument("--docs", default=None, help="also write overfit.json and the figures here (e.g. docs)")
    args = parser.parse_args(argv)
    out = Path(args.out)
    if args.command == "timing":
        from .train import timing

        print(json.dumps(timing(out), indent=1))
        return 0
    if args.command == "report":
        from .report import report

        print(report(out, Path(args.source) if args.source else None, Path(args.docs) if args.docs else None))
        return 0
    jobs = build_jobs(tuple(args.seeds), not args.no_sensitivity)
    settings = dict(args.set)
    if args.command == "work" or args.workers <= 1:
        from .workers import work

        work(jobs, out, settings, args.train_file)
        return 0
    from .workers import run

    rest = ["--seeds", *map(str, args.seeds), *(f"--set={k}={v}" for k, v in settings.items())]
    rest += ["--no-sensitivity"] if args.no_sensitivity else []
    rest += [f"--train-file={args.train_file}"] if args.train_file else []
    run(out, args.workers, rest)
    print(json.dumps({"raw": str(out / "raw")}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
