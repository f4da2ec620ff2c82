"""`python -m experiments.recipes_as_shipped run | report`: see the package docstring."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from . import RECIPES, RESULTS, __doc__, measure, report


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m experiments.recipes_as_shipped",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("run", help="train each recipe as shipped, one at a time, and record it")
    p.add_argument("names", nargs="*", default=list(RECIPES), help=f"default: {' '.join(RECIPES)}")
    p.add_argument("--out", type=Path, default=Path("runs/as_shipped"), help="run folders (OUT/NAME)")
    p.add_argument("--results", type=Path, default=RESULTS, help="where the raw JSON goes")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="an override (not as shipped)")
    p.add_argument("--overwrite", action="store_true", help="replace an earlier run in OUT/NAME (hf-ot's --overwrite)")
    p.add_argument("--limit-min", type=float, default=None, help="stop a recipe still running after this long")
    p = sub.add_parser("report", help="report.md from the raw JSON")
    p.add_argument("--results", type=Path, default=RESULTS)
    p.add_argument("--out", type=Path, default=None, help="default: report.md beside this code")
    args = parser.parse_args(argv)
    if args.command == "report":
        print(report(args.results, *([args.out] if args.out else [])))
        return 0
    args.results.mkdir(parents=True, exist_ok=True)
    failed = 0
    for name in args.names:
        print(f"{name}: training as a user would ...", file=sys.stderr, flush=True)
        limit = None if args.limit_min is None else 60 * args.limit_min
        record = measure(name, args.out, args.set, args.overwrite, limit)
        (args.results / f"{name}.json").write_text(json.dumps(record, indent=1) + "\n")
        failed += record["returncode"] != 0
        print(f"{name}: exit {record['returncode']}, {record['wall_s']} s, {record.get('metrics')}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
