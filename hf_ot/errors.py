"""Error kinds the CLI tells apart by exit code, as argparse and the Hugging Face CLIs do."""


class UsageError(ValueError):
    """The command, its arguments or its config ask for something invalid or unsafe; nothing was done. Fix the call
    (the message says how). `hf-ot` exits 2 on it; on any other failure, 1."""


class Terminated(KeyboardInterrupt):
    """SIGTERM (Slurm preemption, `docker stop`, systemd), handled as Ctrl-C is; `hf-ot` exits 143 on it."""
