"""The errors hf_ot raises on purpose, one family under `HfOtError`, and the exit code `hf-ot` gives each kind.

Each class also derives from the built-in error it refines (a UsageError is a ValueError), so code that caught the
built-in keeps working. `exit_code` is the one place that maps an error to an exit code, as argparse and the Hugging
Face CLIs do: 2 for a usage error (nothing was done), 1 for any other failure hf_ot or its libraries report (bad
data, no network or token, a diverged run, a missing extra), 130 for Ctrl-C, 143 for SIGTERM; anything else is a bug
and keeps its traceback.
"""

from __future__ import annotations

OK = 0
FAILED = 1
USAGE = 2
INTERRUPTED = 130  # the shell's code for Ctrl-C
TERMINATED = 143  # the shell's code for SIGTERM (128 + 15)


class HfOtError(Exception):
    """Base of hf_ot's own errors: the message says what went wrong and how to fix it."""

    exit_code: int = FAILED


class UsageError(HfOtError, ValueError):
    """The command, its arguments or its config ask for something invalid or unsafe; nothing was done. Fix the call
    (the message says how)."""

    exit_code = USAGE


class MissingDependency(HfOtError, ImportError):
    """An optional dependency group is not installed; the message names the `pip install 'hf-ot[...]'` to run."""


class PushError(HfOtError, RuntimeError):
    """A push that could not happen; the message says why and what to do."""


class SaveError(HfOtError, OSError):
    """Writing a model folder failed (a full disk, a lost mount): the message names the cause and says the earlier
    folder is unchanged."""


class TrainingDiverged(HfOtError, RuntimeError):
    """The loss became NaN or infinite; the message says where the last good checkpoint is."""


class NoTargets(HfOtError, ValueError):
    """A training batch with no label to predict (all -100): its loss is NaN by construction, not by divergence;
    the message says how to fix the data."""


class Terminated(KeyboardInterrupt):
    """SIGTERM (Slurm preemption, `docker stop`, systemd), handled as Ctrl-C is: a KeyboardInterrupt, not an
    Exception (HfOtError), so that no `except Exception` swallows it and every cleanup for Ctrl-C runs for it too.
    `hf-ot` exits 143 on it (exit_code)."""

    exit_code: int = TERMINATED


# Errors of the libraries hf_ot calls that describe the input or the environment rather than a bug: a data file that
# is not there, a network or token problem, a value transformers or datasets refuse.
_REPORTED_FOREIGN = (ValueError, OSError, ImportError)


def exit_code(err: BaseException) -> int | None:
    """The exit code `hf-ot` gives `err`; None for a bug, whose traceback should be kept."""
    if isinstance(err, Terminated):
        return TERMINATED
    if isinstance(err, KeyboardInterrupt):
        return INTERRUPTED
    if isinstance(err, HfOtError):
        return err.exit_code
    if isinstance(err, _REPORTED_FOREIGN):
        return FAILED
    return None


def require(extra: str, *modules: str) -> None:
    """A MissingDependency naming the extra to install, not an ImportError traceback, when a module is missing."""
    import importlib.util

    missing = [m for m in modules if importlib.util.find_spec(m) is None]
    if missing:
        raise MissingDependency(f"This needs {', '.join(missing)}: pip install 'hf-ot[{extra}]'.")


__all__ = [
    "FAILED",
    "INTERRUPTED",
    "OK",
    "TERMINATED",
    "USAGE",
    "HfOtError",
    "MissingDependency",
    "NoTargets",
    "PushError",
    "SaveError",
    "Terminated",
    "TrainingDiverged",
    "UsageError",
    "exit_code",
    "require",
]
