"""`python -m experiments.fair run | work | report | flops`: see the package docstring."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from experiments.overfit.__main__ import _setting

from . import __doc__ as DOC

GROUPS = ("select", "report", "long", "ablation", "extra", "infer")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m experiments.fair", description=(DOC or "").split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    for name in ("run", "work"):
        p = sub.add_parser(name, help="train and evaluate every run" + (" (one process)" if name == "work" else ""))
        p.add_argument("--out", default="runs/fair")
        p.add_argument("--set", action="append", default=[], type=_setting, metavar="KEY=VALUE", help="a SETTINGS key")
        p.add_argument("--train-file", default=None, help="another text instead of Tiny Shakespeare (tests)")
        p.add_argument(
            "--only", nargs="+", default=[], choices=GROUPS, help="the jobs of these groups (selection runs first)"
        )
        if name == "run":
            p.add_argument("--workers", type=int, default=2, help="processes, one thread each")
    p = sub.add_parser("flops", help="training FLOPs per step of every model, analytic and counted (OUT/flops.json)")
    p.add_argument("--out", default="runs/fair")
    p.add_argument("--train-file", default=None, help="another text instead of Tiny Shakespeare")
    p = sub.add_parser("report", help="tables and figures from the raw results")
    p.add_argument("--out", default="runs/fair")
    p.add_argument("--from", dest="source", default=None, help="a combined fair-comparison.json instead of OUT/raw")
    p.add_argument("--docs", default=None, help="also write NAME.json and the figure here (docs/results)")
    p.add_argument(
        "--name", default="fair-comparison", help="the JSON's and the figure's name (default: the first window's)"
    )
    args = parser.parse_args(argv)
    if args.command == "flops":
        from .flops import flops_table

        table = flops_table(args.train_file)
        Path(args.out).mkdir(parents=True, exist_ok=True)
        (Path(args.out) / "flops.json").write_text(json.dumps(table, indent=1))
        print(json.dumps(table, indent=1))
        return 0
    if args.command == "report":
        from .report import report

        print(
            report(
                Path(args.out),
                Path(args.source) if args.source else None,
                Path(args.docs) if args.docs else None,
                args.name,
            )
        )
        return 0
    out = Path(args.out)
    settings = dict(args.set)
    if args.command == "work" or args.workers <= 1:
        from .workers import work

        work(out, settings, args.train_file, only=tuple(args.only))
        return 0
    from .workers import run

    rest = [f"--set={k}={v}" for k, v in settings.items()]
    rest += [f"--train-file={args.train_file}"] if args.train_file else []
    rest += ["--only", *args.only] if args.only else []
    run(out, args.workers, rest)
    print(json.dumps({"raw": str(out / "raw")}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
