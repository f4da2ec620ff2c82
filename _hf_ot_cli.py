"""The `hf-ot` console script. A console script imports the module holding its function before anything can catch an
error, and `hf_ot.cli` imports torch and transformers (seconds): importing it here, inside a try, lets Ctrl-C in those
seconds exit as it does later (130, a message, no traceback)."""

import sys


def main() -> int:
    try:
        from hf_ot.cli import main as run
    except KeyboardInterrupt:
        print("hf-ot: interrupted.", file=sys.stderr)
        return 130  # hf_ot.errors.INTERRUPTED (importing hf_ot is what was interrupted)
    return run()
