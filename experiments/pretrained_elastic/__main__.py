"""`python -m experiments pretrained_elastic COMMAND ...`: see the package docstring."""

from __future__ import annotations

import sys

from . import __doc__ as DOC


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] in ("-h", "--help"):
        print("usage: python -m experiments pretrained_elastic COMMAND [ARGS ...]\n\n" + (DOC or ""))
        return 0
    if argv[0] == "report":
        from .report import main as report

        report(argv[1:])
    elif argv[0] == "decoder":
        from .decoder import main as decoder

        decoder(argv[1:])
    else:
        from .run import main as run

        run(argv)
    return 0


if __name__ == "__main__":
    sys.exit(main())
