"""`python -m experiments STUDY [ARGS ...]`: run any study; without a study, list them."""

from __future__ import annotations

import importlib.util
import runpy
import sys

from . import STUDIES


def usage() -> str:
    lines = ["usage: python -m experiments STUDY [ARGS ...]   (STUDY --help: its commands)", "", "studies:"]
    for name, (module, what, page) in STUDIES.items():
        where = f" (docs/results/{page})" if page else ""
        missing = "" if available(module) else "  [not in this checkout]"
        lines.append(f"  {name:20s} {what}{where}{missing}")
    return "\n".join(lines)


def available(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:  # a parent package is missing
        return False


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] in ("-h", "--help"):
        print(usage())
        return 0
    name, rest = argv[0], argv[1:]
    if name not in STUDIES:
        print(f"python -m experiments: unknown study {name!r}; choose one of: {', '.join(STUDIES)}", file=sys.stderr)
        return 2
    module = STUDIES[name][0]
    if not available(module):
        print(f"python -m experiments: study {name!r} needs {module}, not in this checkout", file=sys.stderr)
        return 2
    # `hf-ot paper ...` is a subcommand of the installed CLI; every other study is a runnable package of its own
    rest = ["paper", *rest] if name == "paper" else rest
    saved = sys.argv
    sys.argv = [module, *rest]  # run_module puts the module's file in sys.argv[0]
    try:
        runpy.run_module(module, run_name="__main__", alter_sys=True)
    finally:
        sys.argv = saved
    return 0


if __name__ == "__main__":
    sys.exit(main())
