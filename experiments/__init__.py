"""Research code that uses hf_ot but is not part of the installed library: the studies behind docs/results/.

Run any study from the repository root with `python -m experiments STUDY [ARGS ...]`; `python -m experiments` lists
them, and `python -m experiments STUDY --help` gives a study's own commands."""

# name -> (module run by `python -m experiments NAME`, what it measures, its results page under docs/results/).
# `paper` is the installed `hf-ot paper` command; `fair` arrives with experiments/fair.
STUDIES: dict[str, tuple[str, str, str]] = {
    "paper": ("hf_ot.cli", "the paper's Shakespeare-char experiments at CPU scale (`hf-ot paper`)", "paper-cpu.md"),
    "studies": (
        "experiments.studies",
        "depth elasticity, MiniLM on SST-2, sharing vs depth vs LayerNorms",
        "studies.md",
    ),
    "pretrained_elastic": (
        "experiments.pretrained_elastic",
        "fine-tuning pretrained checkpoints into elastic OT models",
        "pretrained-elastic.md",
    ),
    "overfit": ("experiments.overfit", "the paper's claim where the baseline overfits", "overfitting.md"),
    "fair": ("experiments.fair", "the fair comparison of OT and its baseline", "fair-comparison.md"),
    "recipes_as_shipped": (
        "experiments.recipes_as_shipped",
        "every recipe trained as shipped: the times and figures README and recipes/README.md state",
        "",
    ),
    "small_data": (
        "experiments.small_data",
        "pretrained MiniLM on 256 / 2,048 SST-2 sentences: tuned plain fine-tuning against OT fine-tuning",
        "pretrained-small-data.md",
    ),
}
