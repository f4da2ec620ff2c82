"""The studies' job list: configs, seeds and the settings of each run, in the order they run."""

from __future__ import annotations

from dataclasses import dataclass, field

CONFIGS = {
    "ot": "recipes/configs/study_shakespeare_ot.yaml",
    "baseline": "recipes/configs/study_shakespeare_baseline.yaml",
    "sst2": "recipes/configs/study_sst2_minilm.yaml",
}
SEEDS = (1, 2, 3)
LAMBDAS = (0.0, 0.1, 1.0)
ELASTIC_STEPS = (1, 2, 3, 5, 10, 20)
ELASTIC_SOLVERS = ("euler", "heun", "rk4")
NOISE_RATES = (0.05, 0.1, 0.2)
SST_STEPS = (2, 4)
STUDIES = ("elasticity", "finetune", "matched")
# SST-2 evaluation cost (MiniLM forwards dominate on CPU): the accuracy after fine-tuning uses all 872 validation
# sentences; the noisy accuracies every 4th one (218, the same for every model); the step-0 accuracies (at M and at
# M=1, the pretrained function) the first 256.
NOISE_SUBSET_EVERY = 4
BEFORE_SENTENCES = 256
# study 3's models (all trained with the same steps and data); the OT shape is the OT config's (3 blocks, 96 dim, M=5)
MATCHED = {
    "baseline": ("baseline", []),  # (a) the paper-shape baseline: 4 layers, 128 dim
    "ot_ln": ("ot", ["model.ot.ot_block_layer_norms=true"]),  # (b) 3 shared blocks x M=5, LayerNorms kept
    "compute_matched": ("baseline", ["model.scratch.n_layer=15", "model.scratch.n_embd=96"]),  # (c) 3 x 5 layers
    "param_matched": ("baseline", ["model.scratch.n_layer=3", "model.scratch.n_embd=96"]),  # (d) 3 layers, one pass
}


@dataclass
class Job:
    id: str
    kind: str  # "lm" or "sst2"
    config: str
    overrides: list[str]
    seed: int
    studies: list[str]
    elastic: bool = False  # evaluate the M' x solver grid
    before: bool = False  # evaluate before fine-tuning too
    info: dict = field(default_factory=dict)


def lam_tag(lam: float) -> str:
    return f"lam{lam:g}"


def build_jobs(studies=STUDIES, seeds=SEEDS, lm_set=(), sst_set=()) -> list[Job]:
    """Every run of the chosen studies, in the order they run: the Shakespeare-char runs (studies 1 and 3) seed by
    seed, then SST-2 configuration by configuration (see below), so that a study cut short by the clock still has
    whole seeds. The OT no-LayerNorm lambda=1 runs serve study 1 and study 3's "(b) without LayerNorms"."""
    lm, sst = [], []
    for seed in seeds:
        if "elasticity" in studies or "matched" in studies:
            for lam in LAMBDAS if "elasticity" in studies else (1.0,):
                used = ["elasticity"] if "elasticity" in studies else []
                if lam == 1.0 and "matched" in studies:
                    used.append("matched")
                lm.append(
                    Job(
                        f"ot_noln_{lam_tag(lam)}_s{seed}",
                        "lm",
                        CONFIGS["ot"],
                        [f"model.ot.ot_lambda={lam}", *lm_set],
                        seed,
                        used,
                        elastic="elasticity" in studies,
                        info={"model": "ot_noln", "lambda": lam},
                    )
                )
        if "matched" in studies:
            for name, (config, overrides) in MATCHED.items():
                lm.append(
                    Job(
                        f"{name}_s{seed}",
                        "lm",
                        CONFIGS[config],
                        [*overrides, *lm_set],
                        seed,
                        ["matched"],
                        info={"model": name},
                    )
                )
    if "finetune" in studies:
        # config by config, all seeds of each, in order of what they tell (base; M=2 without and with the transport
        # cost; M=4; lambda=0.1 last): what the clock allows ends with whole configs of 3 seeds
        grid = [(None, None), (2, 0.0), (2, 1.0), (4, 1.0), (4, 0.0), (2, 0.1), (4, 0.1)]
        grid = [(m, lam) for m, lam in grid if m is None or (m in SST_STEPS and lam in LAMBDAS)]
        measured_before = set()
        for steps, lam in grid:
            # lambda does not change the function at step 0: "before" is measured once per (M, seed)
            before = steps not in measured_before
            measured_before.add(steps)
            for seed in seeds:
                if steps is None:
                    sst.append(
                        Job(
                            f"finetune_base_s{seed}",
                            "sst2",
                            CONFIGS["sst2"],
                            ["model.ot=null", *sst_set],
                            seed,
                            ["finetune"],
                            before=True,
                            info={"model": "base", "num_steps": 1},
                        )
                    )
                    continue
                sst.append(
                    Job(
                        f"finetune_M{steps}_{lam_tag(lam)}_s{seed}",
                        "sst2",
                        CONFIGS["sst2"],
                        [f"model.ot.ot_num_steps={steps}", f"model.ot.ot_lambda={lam}", *sst_set],
                        seed,
                        ["finetune"],
                        before=before,
                        info={"model": "ot", "num_steps": steps, "lambda": lam},
                    )
                )
    return lm + sst


def field_evaluations(num_steps: int, solver: str) -> int:
    from hf_ot.models import num_stages

    return num_steps * num_stages(solver)
