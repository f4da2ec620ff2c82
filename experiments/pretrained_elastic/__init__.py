"""The pretrained-elasticity study: fine-tuning pretrained checkpoints (MiniLM on SST-2; a char GPT-2 on the Python
manual) into depth-elastic OT models, measured over a grid of (solver, M'). Page: docs/results/pretrained-elastic.md.

    python -m experiments pretrained_elastic list | run NAME ... | noise NAME ... | recipe ... | time   (run.py)
    python -m experiments pretrained_elastic report [--figures docs/figures]                       (report.py)
    python -m experiments pretrained_elastic decoder pretrain | run NAME ... | report | list | time (decoder.py)

The three files also run as scripts (`python experiments/pretrained_elastic/run.py ...`)."""
