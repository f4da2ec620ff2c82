"""Recipe script: `python recipes/causal_lm.py [CONFIG] [--set key=value ...]`, also under torchrun / accelerate launch.

Same as `hf-ot train CONFIG`; see recipes/README.md for the configs and their full-size GPU settings.
"""

import sys

from hf_ot.cli import main

DEFAULT_CONFIG = "causal_lm_shakespeare_char"  # recipes/configs/causal_lm_shakespeare_char.yaml, shipped in the package

if __name__ == "__main__":
    args = sys.argv[1:]
    if not args or args[0].startswith("-"):
        args = [DEFAULT_CONFIG, *args]
    sys.exit(main(["train", *args]))
