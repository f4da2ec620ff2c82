"""`python -m experiments.studies run | all | timing | report`: see the package docstring."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from . import __doc__ as STUDIES_DOC
from .jobs import SEEDS, STUDIES
from .report import report
from .runs import timing
from .workers import run


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m experiments.studies", description=(STUDIES_DOC or "").split("\n\n")[0]
    )
    sub = parser.add_subparsers(dest="command", required=True)
    for name in ("run", "all"):
        p = sub.add_parser(name, help="train and evaluate every run" + (" then report" if name == "all" else ""))
        p.add_argument("--out", default="runs/studies")
        p.add_argument("--workers", type=int, default=2, help="processes, one thread each")
        p.add_argument("--study", nargs="+", default=list(STUDIES), choices=STUDIES)
        p.add_argument("--seeds", type=int, nargs="+", default=list(SEEDS))
        p.add_argument(
            "--lm-set",
            action="append",
            default=[],
            metavar="KEY=VALUE",
            help="override for every Shakespeare-char run, e.g. training.max_steps=200",
        )
        p.add_argument(
            "--sst-set", action="append", default=[], metavar="KEY=VALUE", help="override for every SST-2 run"
        )
        if name == "all":
            p.add_argument("--docs", default=None, help="also write the JSON and figures here (e.g. docs)")
    p = sub.add_parser("timing", help="s/step of every study model, back to back in one process")
    p.add_argument("--out", default="runs/studies")
    p = sub.add_parser("report", help="tables and figures from the raw results")
    p.add_argument("--out", default="runs/studies")
    p.add_argument("--from", dest="source", default=None, help="a combined studies.json instead of OUT/raw")
    p.add_argument("--docs", default=None, help="also write the JSON and figures here (e.g. docs)")
    args = parser.parse_args(argv)
    out = Path(args.out)
    if args.command == "timing":
        print(json.dumps(timing(out), indent=1))
        return 0
    if args.command in ("run", "all"):
        run(out, args.workers, args.study, args.seeds, args.lm_set, args.sst_set)
    if args.command in ("report", "all"):
        report(
            out, Path(args.source) if getattr(args, "source", None) else None, Path(args.docs) if args.docs else None
        )
        print((out / "tables.md").read_text())
    return 0


if __name__ == "__main__":
    sys.exit(main())
