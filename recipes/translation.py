"""Recipe script: `python recipes/translation.py [CONFIG] [--set key=value ...]`, also under torchrun / accelerate
launch.

Same as `hf-ot train CONFIG`; see recipes/README.md for the configs and their full-size GPU settings.
"""

import sys

from hf_ot.cli import main

DEFAULT_CONFIG = "translation_t5"  # recipes/configs/translation_t5.yaml, shipped in the package

if __name__ == "__main__":
    args = sys.argv[1:]
    if not args or args[0].startswith("-"):
        args = [DEFAULT_CONFIG, *args]
    sys.exit(main(["train", *args]))
