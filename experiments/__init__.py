"""Research code that uses hf_ot but is not part of the installed library: the studies behind docs/results.md.

Run from the repository root, e.g. `python -m experiments.studies run --out runs/studies`."""
