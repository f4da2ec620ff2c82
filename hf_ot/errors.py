"""Error kinds the CLI tells apart by exit code, as argparse and the Hugging Face CLIs do."""


class UsageError(ValueError):
    """The command, its arguments or its config ask for something invalid or unsafe; nothing was done. Fix the call
    (the message says how). `hf-ot` exits 2 on it; on any other failure, 1."""
