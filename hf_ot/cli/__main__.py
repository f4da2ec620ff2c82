"""`python -m hf_ot.cli ...` is `hf-ot ...` (torchrun -m hf_ot.cli, for example)."""

import sys

from . import main

sys.exit(main())
