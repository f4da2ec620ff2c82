"""The pretrained-elasticity study, decoder part: fine-tuning a pretrained GPT-2-style char model into a
depth-elastic OT model.

The "pretrained checkpoint" is a plain transformers GPT2LMHeadModel (no OT; 4 layers x 128 wide x 4 heads, block 128,
no dropout) trained here with AdamW on tinyshakespeare (nanoGPT's split: first 90% train, last 10% val), saved under
checkpoints/ and reused when present. Its char vocabulary is built over tinyshakespeare + the fine-tuning text, so it
covers both. Every recipe then converts that one checkpoint with the public API, `hf_ot.convert(folder,
ot_num_steps=M, ot_solver="euler", ot_mode="residual", ot_lambda=0.0)`, and fine-tunes it on the Python
reference manual's text (hf_ot.recipes.data.embedded_text, the quickstart's; 90/10 split) with the same optimiser,
schedule and data order per seed. As in run.py (the encoder study) the objective is assembled here, not inside the
model: loss = CE + lambda * reg (+ nu * distill); `reg` is the model's own transport cost (`output_reg=True`).

Recipes (named as in run.py):
    base        plain fine-tuning = converted residual M=1 Euler (which IS the pretrained GPT-2), lambda 0
    ot4_l0      M=4 Euler, lambda 0
    ot4_l1      M=4 Euler, lambda 1
    ot2_l0.1    M=2 Euler, lambda 0.1
    rd4         random depth: each step samples M' in {1, 2, 4} (Euler), lambda 0
    ot4_l1_d1   M=4 Euler, lambda 1 + nu=1 distillation mean|X(T) - X_pre(T)|^2 / mean|X_pre(T)|^2

X(T) is the end of the depth trajectory before GPT-2's final LayerNorm ln_f: an OT model's `hidden_states` is the
trajectory (X(t_0), ..., X(t_M)) of the stack, X(t_0) = wte + wpe, and ln_f is applied after it. (A plain GPT-2's
hidden_states[-1] is after ln_f, so the teacher is not read from the plain model: X_pre(T) is the last trajectory
state of the checkpoint converted at M=1 Euler residual, which is the output of the L blocks before ln_f; the run
asserts once that ln_f(X_pre(T)) is the plain model's last_hidden_state.)

After training every model is evaluated on a FIXED set of validation blocks of the fine-tuning text (the same for
every model and for the pretrained checkpoint) at every (solver, M') of euler/heun/rk4 x {1, 2, 4, 8}, by setting
model.config.ot_solver / ot_num_steps before each forward; loss = mean token cross-entropy (nats) over all
blocks x 128 predicted tokens. "cheapest" = the fewest field evaluations per forward (M' x stages) whose loss is
within +0.01 nats of the model's own trained setting (rd4: Euler M'=4).

Usage (one thread per process; a rerun skips finished runs; two processes can run in parallel on two cores):
    python experiments/pretrained_elastic/decoder.py pretrain
    python experiments/pretrained_elastic/decoder.py run base ot4_l0 ot4_l1 --seeds 1 2
    python experiments/pretrained_elastic/decoder.py report
    python experiments/pretrained_elastic/decoder.py time          # s/step of pretraining and of an M=4 step
Raw JSON: experiments/pretrained_elastic/results/decoder/decoder__RECIPE__sSEED.json and decoder__pretrained.json
(a subfolder: report.py reads every results/*.json as an encoder run). Figure: figures/decoder_grid.png.
Smoke tests: PE_RESULTS, PE_CHECKPOINTS and PE_FIGURES redirect the three folders (absolute paths allowed).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import random
import statistics
import sys
import time
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

HERE = Path(__file__).resolve().parent
RESULTS = HERE / os.environ.get("PE_RESULTS", "results") / "decoder"
CHECKPOINTS = HERE / os.environ.get("PE_CHECKPOINTS", "checkpoints")  # ignored by git
FIGURES = HERE / os.environ.get("PE_FIGURES", "figures")
DATA = Path(os.environ.get("HF_OT_SHARED_DATA", HERE.parents[1] / ".." / "shared" / "data")).resolve()
if not (DATA / "tinyshakespeare").exists():
    DATA = Path("/work/shared/data")

SOLVER_STAGES = {"euler": 1, "heun": 2, "rk4": 4}
GRID = [(s, m) for s in ("euler", "heun", "rk4") for m in (1, 2, 4, 8)]
TOL = 0.01  # nats: "within +0.01 of the model's own trained setting"

# The pretrained checkpoint (plain GPT-2, trained on tinyshakespeare).
ARCH = dict(n_layer=4, n_embd=128, n_head=4, block=128)
PRETRAIN = dict(batch=16, lr=1e-3, min_lr=1e-4, warmup=50, weight_decay=0.1, betas=(0.9, 0.99), clip=1.0, seed=0)
DEFAULT_PRETRAIN_STEPS = 1100  # 0.21 s/step on one thread (`time`): ~4 min
# Fine-tuning (every recipe): AdamW, linear warm-up then linear decay to 0 (run.py's schedule).
FINETUNE = dict(batch=16, lr=5e-4, warmup=10, weight_decay=0.0, betas=(0.9, 0.99), clip=1.0)
DEFAULT_STEPS = 200  # M=4 Euler: 0.82-0.90 s/step on one thread: ~3 min
DEFAULT_VAL_BLOCKS = 32
LOG_EVERY = 10

RECIPES = {
    "base": dict(train=("euler", 1), lam=0.0, note="plain fine-tuning (= converted residual M=1 Euler, lambda 0)"),
    "ot4_l0": dict(train=("euler", 4), lam=0.0, note="OT M=4 Euler, lambda 0"),
    "ot4_l1": dict(train=("euler", 4), lam=1.0, note="OT M=4 Euler, lambda 1"),
    "ot2_l0.1": dict(train=("euler", 2), lam=0.1, note="OT M=2 Euler, lambda 0.1"),
    "rd4": dict(
        train=("euler", 4),
        sample=[("euler", 1), ("euler", 2), ("euler", 4)],
        lam=0.0,
        note="random depth: M' in {1,2,4} Euler per step, lambda 0",
    ),
    "ot4_l1_d1": dict(
        train=("euler", 4),
        lam=1.0,
        distill=1.0,
        note="OT M=4 lambda 1 + distillation of X(T) (before ln_f) to the frozen pretrained X_pre(T), nu=1",
    ),
}


def log(*a):
    print(time.strftime("%H:%M:%S"), *a, file=sys.stderr, flush=True)


def key_of(solver, steps):
    return f"{solver}:{steps}"


def evals(key: str) -> int:
    solver, steps = key.split(":")
    return SOLVER_STAGES[solver] * int(steps)


def write_json(path: Path, obj):
    tmp = path.with_suffix(f".tmp{os.getpid()}")
    tmp.write_text(json.dumps(obj, indent=1))
    tmp.replace(path)


def machine():
    return dict(
        python=platform.python_version(),
        torch=torch.__version__,
        transformers=__import__("transformers").__version__,
        threads=torch.get_num_threads(),
        finished=time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
    )


# ------------------------------------------------------------------------------------------------ data

_CACHE = {}


def texts():
    """(tinyshakespeare, the fine-tuning text)."""
    if "texts" not in _CACHE:
        from hf_ot.recipes.data import embedded_text

        _CACHE["texts"] = ((DATA / "tinyshakespeare" / "input.txt").read_text(encoding="utf-8"), embedded_text())
    return _CACHE["texts"]


def tokenizer():
    """A char tokenizer over tinyshakespeare + the fine-tuning text, and a fast encoder with the same ids."""
    if "tok" not in _CACHE:
        from hf_ot.recipes import build_char_tokenizer

        shakespeare, python_text = texts()
        tok = build_char_tokenizer(shakespeare + python_text)
        vocab = tok.get_vocab()

        def encode(text: str) -> torch.Tensor:
            return torch.tensor([vocab[c] for c in text], dtype=torch.long)

        for text in (shakespeare, python_text):  # the fast path is the tokenizer's own encoding
            sample = text[1000:3000]
            assert tok(sample)["input_ids"] == encode(sample).tolist()
        _CACHE["tok"] = (tok, encode)
    return _CACHE["tok"]


def splits(which: str):
    """(train ids, val ids) of 'shakespeare' or 'python': first 90% / last 10%."""
    if which not in _CACHE:
        _, encode = tokenizer()
        text = texts()[0 if which == "shakespeare" else 1]
        ids = encode(text)
        n = int(len(ids) * 0.9)
        _CACHE[which] = (ids[:n], ids[n:])
    return _CACHE[which]


def random_batch(ids, batch, generator):
    """(inputs, targets), each (batch, block), from uniformly random starts."""
    block = ARCH["block"]
    starts = torch.randint(0, len(ids) - block - 1, (batch,), generator=generator).tolist()
    x = torch.stack([ids[s : s + block + 1] for s in starts])
    return x[:, :-1], x[:, 1:]


def val_blocks(which: str, n: int):
    """A fixed set of n blocks (evenly spaced starts over the val split): (inputs, targets), each (n, block)."""
    _, ids = splits(which)
    block = ARCH["block"]
    last = len(ids) - block - 1
    starts = [round(i * last / max(n - 1, 1)) for i in range(n)]
    x = torch.stack([ids[s : s + block + 1] for s in starts])
    return x[:, :-1], x[:, 1:]


def ce(logits, y):
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(), y.reshape(-1))


# ------------------------------------------------------------------------------------------------ pretraining


def checkpoint_dir(pretrain_steps: int) -> Path:
    a = ARCH
    return CHECKPOINTS / f"decoder_gpt2char_l{a['n_layer']}w{a['n_embd']}h{a['n_head']}_b{a['block']}_s{pretrain_steps}"


def plain_model(vocab_size: int, pad_id: int):
    from transformers import GPT2Config, GPT2LMHeadModel

    cfg = GPT2Config(
        n_layer=ARCH["n_layer"],
        n_embd=ARCH["n_embd"],
        n_head=ARCH["n_head"],
        n_positions=ARCH["block"],
        vocab_size=vocab_size,
        resid_pdrop=0.0,
        embd_pdrop=0.0,
        attn_pdrop=0.0,
        bos_token_id=None,
        eos_token_id=None,
        pad_token_id=pad_id,
    )
    torch.manual_seed(PRETRAIN["seed"])
    return GPT2LMHeadModel(cfg)


def pretrain_lr(step, steps):
    P = PRETRAIN
    if step < P["warmup"]:
        return P["lr"] * (step + 1) / P["warmup"]
    frac = (step - P["warmup"]) / max(1, steps - P["warmup"])
    return P["min_lr"] + 0.5 * (P["lr"] - P["min_lr"]) * (1 + math.cos(math.pi * min(frac, 1.0)))


def pretrain_step(model, opt, x, y):
    loss = ce(model(input_ids=x).logits, y)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), PRETRAIN["clip"])
    opt.step()
    return loss.item()


def pretrain_opt(model):
    P = PRETRAIN
    return torch.optim.AdamW(model.parameters(), lr=P["lr"], weight_decay=P["weight_decay"], betas=P["betas"])


def ensure_pretrained(pretrain_steps: int) -> Path:
    """The checkpoint folder, trained now if absent (written to a temporary folder, then renamed)."""
    folder = checkpoint_dir(pretrain_steps)
    if (folder / "train_info.json").is_file():
        log("reuse", folder)
        return folder
    torch.set_num_threads(1)
    tok, _ = tokenizer()
    train_ids, _ = splits("shakespeare")
    model = plain_model(len(tok), tok.pad_token_id).train()
    opt = pretrain_opt(model)
    g = torch.Generator().manual_seed(PRETRAIN["seed"])
    curve, window = [], []
    t0 = time.time()
    for step in range(pretrain_steps):
        for group in opt.param_groups:
            group["lr"] = pretrain_lr(step, pretrain_steps)
        window.append(pretrain_step(model, opt, *random_batch(train_ids, PRETRAIN["batch"], g)))
        if (step + 1) % LOG_EVERY == 0 or step + 1 == pretrain_steps:
            curve.append(dict(step=step + 1, loss=statistics.mean(window), lr=opt.param_groups[0]["lr"]))
            window = []
            if len(curve) % 10 == 0:
                log("pretrain", curve[-1], f"{(time.time() - t0) / (step + 1):.3f} s/step")
    train_s = time.time() - t0
    model.eval()
    info = dict(
        arch=ARCH,
        protocol=PRETRAIN,
        steps=pretrain_steps,
        train_s=train_s,
        s_per_step=train_s / pretrain_steps,
        parameters=model.num_parameters(),
        vocab_size=len(tok),
        curve=curve,
        machine=machine(),
    )
    tmp = folder.with_name(folder.name + f".tmp{os.getpid()}")
    model.save_pretrained(tmp)
    tok.save_pretrained(tmp)
    (tmp / "train_info.json").write_text(json.dumps(info, indent=1))
    folder.parent.mkdir(parents=True, exist_ok=True)
    tmp.rename(folder)
    log("pretrained", folder, f"{train_s:.0f} s, {info['s_per_step']:.3f} s/step")
    return folder


@torch.inference_mode()
def plain_val_loss(model, x, y):
    model.eval()
    return ce(model(input_ids=x).logits, y).item()


def pretrained_info(pretrain_steps: int, n_val: int) -> dict:
    """decoder__pretrained.json: the checkpoint's training info, its val losses before fine-tuning, and the grid of
    the checkpoint converted as is (zero-shot elasticity)."""
    from transformers import GPT2LMHeadModel

    torch.set_num_threads(1)
    path = RESULTS / "decoder__pretrained.json"
    folder = ensure_pretrained(pretrain_steps)
    if path.exists():
        info = json.loads(path.read_text())
        if info.get("checkpoint") == folder.name and info.get("val_blocks") == n_val:
            return info
        log("rewrite", path.name, "(another checkpoint or number of val blocks)")
    info = json.loads((folder / "train_info.json").read_text())
    plain = GPT2LMHeadModel.from_pretrained(folder)
    info["checkpoint"] = folder.name
    info["val_blocks"] = n_val
    info["val_loss_shakespeare"] = plain_val_loss(plain, *val_blocks("shakespeare", n_val))
    info["val_loss_python"] = plain_val_loss(plain, *val_blocks("python", n_val))  # before fine-tuning
    converted = build(folder, "euler", 1)
    info["grid"] = grid_eval(converted, *val_blocks("python", n_val))
    assert abs(info["grid"]["euler:1"] - info["val_loss_python"]) < 1e-4, (info["grid"]["euler:1"], info)
    RESULTS.mkdir(parents=True, exist_ok=True)
    write_json(path, info)
    log(
        "pretrained val loss: shakespeare",
        round(info["val_loss_shakespeare"], 4),
        "python",
        round(info["val_loss_python"], 4),
    )
    return info


# ------------------------------------------------------------------------------------------------ OT models


def build(folder: Path, solver: str, steps: int):
    import hf_ot

    return hf_ot.convert(str(folder), ot_num_steps=steps, ot_solver=solver, ot_mode="residual", ot_lambda=0.0)


def set_res(model, solver, steps):
    model.config.ot_solver = solver
    model.config.ot_num_steps = steps


@torch.inference_mode()
def grid_eval(model, x, y, batch=32):
    model.eval()
    out = {}
    for solver, steps in GRID:
        set_res(model, solver, steps)
        total = 0.0
        for s in range(0, len(x), batch):
            logits = model(input_ids=x[s : s + batch], output_reg=False).logits
            total += ce(logits, y[s : s + batch]).item() * len(x[s : s + batch])
        out[key_of(solver, steps)] = total / len(x)
    return out


@torch.inference_mode()
def val_reg(model, x, solver, steps, batch=32):
    model.eval()
    set_res(model, solver, steps)
    total = 0.0
    for s in range(0, len(x), batch):
        total += model(input_ids=x[s : s + batch], output_reg=True).reg.item() * len(x[s : s + batch])
    return total / len(x)


def cheapest(grid: dict, trained: str):
    """The fewest field evaluations whose loss is <= the trained setting's + TOL (ties: the lower loss)."""
    ref = grid[trained]
    e, loss, k = min((evals(k), v, k) for k, v in grid.items() if v <= ref + TOL)
    return dict(setting=k, evals=e, loss=loss, ref=ref)


def mean_sq(x):
    return x.float().pow(2).mean()


# ------------------------------------------------------------------------------------------------ fine-tuning


def finetune_run(name: str, seed: int, steps: int, pretrain_steps: int, n_val: int) -> dict:
    from transformers import GPT2LMHeadModel, get_linear_schedule_with_warmup

    rec = RECIPES[name]
    torch.set_num_threads(1)
    folder = checkpoint_dir(pretrain_steps)
    pre = pretrained_info(pretrain_steps, n_val)
    train_ids, _ = splits("python")
    vx, vy = val_blocks("python", n_val)
    model = build(folder, *rec["train"])
    plain = GPT2LMHeadModel.from_pretrained(folder).eval()  # for the step-0 checks only
    teacher = None
    nu, lam = rec.get("distill", 0.0), rec.get("lam", 0.0)
    if nu:
        teacher = build(folder, "euler", 1).eval()  # residual M=1 Euler = the pretrained GPT-2; X_pre(T) before ln_f
        for p in teacher.parameters():
            p.requires_grad_(False)
    P = FINETUNE
    opt = torch.optim.AdamW(model.parameters(), lr=P["lr"], weight_decay=P["weight_decay"], betas=P["betas"])
    sched = get_linear_schedule_with_warmup(opt, P["warmup"], steps)
    g = torch.Generator().manual_seed(seed)  # the data order: the same for every recipe of one seed
    pick = random.Random(1000 + seed)  # random depth's M' draw (does not touch the data order)
    checks = {}
    history, window = [], []
    t_start = time.time()
    for step in range(steps):
        model.train()
        x, y = random_batch(train_ids, P["batch"], g)
        solver, m = pick.choice(rec["sample"]) if rec.get("sample") else rec["train"]
        if step == 0:  # the converted model at M=1 Euler residual is the pretrained GPT-2 (before any update)
            with torch.no_grad():
                set_res(model, "euler", 1)
                diff = (model(input_ids=x, output_reg=False).logits - plain(input_ids=x).logits).abs().max().item()
            assert diff <= 1e-4, f"converted M=1 logits differ from the pretrained model's by {diff}"
            checks["m1_logits_max_abs_diff"] = diff
        set_res(model, solver, m)
        need_traj = step == 0 or teacher is not None
        out = model(input_ids=x, output_reg=True, output_hidden_states=need_traj)
        task, reg = ce(out.logits, y), out.reg.float()
        loss = task + lam * reg
        entry = dict(task=task.item(), reg=reg.item(), M=m)
        if step == 0 and solver == "euler":  # our reading of reg must be hf_ot's: M * sum_k mean|X_k+1 - X_k|^2
            traj = out.hidden_states
            mine = sum(mean_sq(b - a) for a, b in zip(traj[:-1], traj[1:])).item() * m
            assert abs(mine - reg.item()) <= 1e-4 * max(1.0, reg.item()), (mine, reg.item())
            checks["reg_recomputed"] = [mine, reg.item()]
        if teacher is not None:
            with torch.no_grad():
                target = teacher(input_ids=x, output_reg=False, output_hidden_states=True).hidden_states[-1]
                if step == 0:  # X_pre(T) is before ln_f: ln_f of it is the plain model's last hidden state
                    ref = plain.transformer(input_ids=x).last_hidden_state
                    gap = (teacher.transformer.ln_f(target) - ref).abs().max().item()
                    assert gap <= 1e-4, gap
                    checks["teacher_ln_f_max_abs_diff"] = gap
            dist = mean_sq(out.hidden_states[-1] - target) / mean_sq(target)
            loss = loss + nu * dist
            entry["distill"] = dist.item()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), P["clip"])
        opt.step()
        sched.step()
        window.append(entry)
        if (step + 1) % LOG_EVERY == 0 or step + 1 == steps:
            h = dict(step=step + 1, lr=sched.get_last_lr()[0], Ms=[e["M"] for e in window])
            for k in ("task", "reg", "distill"):
                if k in window[0]:
                    h[k] = statistics.mean(e[k] for e in window)  # the mean over the last LOG_EVERY steps
            history.append(h)
            window = []
            if len(history) % 5 == 0:
                log(name, seed, {k: (round(v, 4) if isinstance(v, float) else v) for k, v in h.items()})
    train_s = time.time() - t_start
    t0 = time.time()
    grid = grid_eval(model, vx, vy)
    trained = key_of(*rec["train"])
    res = dict(
        recipe=name,
        seed=seed,
        spec=rec,
        protocol=dict(
            FINETUNE, steps=steps, val_blocks=n_val, block=ARCH["block"], checkpoint=folder.name, grid=GRID, tol=TOL
        ),
        pretrained_val_loss_python=pre["val_loss_python"],
        checks=checks,
        train_s=train_s,
        s_per_step=train_s / steps,
        history=history,
        grid=grid,
        trained=trained,
        cheapest=cheapest(grid, trained),
        val_reg=val_reg(model, vx, *rec["train"]),
    )
    res["eval_s"] = time.time() - t0
    res["machine"] = machine()
    return res


def out_path(name, seed):
    return RESULTS / f"decoder__{name}__s{seed}.json"


def cmd_pretrain(args):
    RESULTS.mkdir(parents=True, exist_ok=True)
    pretrained_info(args.pretrain_steps, args.val_blocks)


def cmd_run(args):
    RESULTS.mkdir(parents=True, exist_ok=True)
    if not (checkpoint_dir(args.pretrain_steps) / "train_info.json").is_file():
        sys.exit(f"no checkpoint {checkpoint_dir(args.pretrain_steps)}: run `decoder.py pretrain` first")
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
                res = finetune_run(name, seed, args.steps, args.pretrain_steps, args.val_blocks)
                write_json(path, res)
                log(
                    "done",
                    name,
                    seed,
                    "loss",
                    round(res["grid"][res["trained"]], 4),
                    "cheapest",
                    res["cheapest"]["setting"],
                    "train_s",
                    round(res["train_s"]),
                    "eval_s",
                    round(res["eval_s"]),
                )
            finally:
                claim.unlink(missing_ok=True)


def cmd_time(args):
    """s/step of pretraining (plain GPT-2) and of an M=4 Euler fine-tuning step with reg, on one thread."""
    import hf_ot

    torch.set_num_threads(1)
    tok, _ = tokenizer()
    ids, _ = splits("shakespeare")
    g = torch.Generator().manual_seed(0)
    model = plain_model(len(tok), tok.pad_token_id).train()
    opt = pretrain_opt(model)
    out = {}
    ts = []
    for _ in range(args.n + 1):
        x, y = random_batch(ids, PRETRAIN["batch"], g)
        t = time.time()
        pretrain_step(model, opt, x, y)
        ts.append(time.time() - t)
    out["pretrain s/step"] = statistics.median(ts[1:])
    ot = hf_ot.convert(model, ot_num_steps=4, ot_solver="euler", ot_mode="residual", ot_lambda=0.0).train()
    opt = torch.optim.AdamW(ot.parameters(), lr=1e-4)
    for m in (4,):
        set_res(ot, "euler", m)
        ts = []
        for _ in range(args.n + 1):
            x, y = random_batch(ids, FINETUNE["batch"], g)
            t = time.time()
            o = ot(input_ids=x, output_reg=True)
            (ce(o.logits, y) + o.reg).backward()
            torch.nn.utils.clip_grad_norm_(ot.parameters(), 1.0)
            opt.step()
            opt.zero_grad()
            ts.append(time.time() - t)
        out[f"finetune euler M={m} s/step"] = statistics.median(ts[1:])
    print(json.dumps(out, indent=1))


# ------------------------------------------------------------------------------------------------ report


def ms(values, digits=3):
    values = list(values)
    if len(values) == 1:
        return f"{values[0]:.{digits}f}"
    return f"{statistics.mean(values):.{digits}f} ± {statistics.stdev(values):.{digits}f}"


def load():
    runs, pre = {}, None
    for p in sorted(RESULTS.glob("decoder__*.json")):
        d = json.loads(p.read_text())
        if p.name == "decoder__pretrained.json":
            pre = d
        else:
            runs.setdefault(d["recipe"], []).append(d)
    return runs, pre


def cmd_report(args):
    runs, pre = load()
    if not runs:
        sys.exit(f"no runs in {RESULTS}")
    order = [r for r in RECIPES if r in runs]
    protocols = {json.dumps(d["protocol"], sort_keys=True) for rs in runs.values() for d in rs}
    out = ["# Decoder: fine-tuning a pretrained GPT-2 char model into elastic OT models", ""]
    if len(protocols) > 1:
        out += ["**Warning: the runs below do not share one protocol (steps, checkpoint or val blocks).**", ""]
    p0 = runs[order[0]][0]["protocol"]
    out.append(
        f"Checkpoint `{p0['checkpoint']}`; fine-tuning {p0['steps']} steps x {p0['batch']} blocks of {p0['block']}; "
        f"val loss = mean token CE (nats) over {p0['val_blocks']} fixed val blocks of the Python text."
    )
    if pre:
        out.append(
            f"Pretrained (before fine-tuning): val loss {pre['val_loss_shakespeare']:.4f} on tinyshakespeare, "
            f"{pre['val_loss_python']:.4f} on the Python text ({pre['steps']} steps, {pre['s_per_step']:.3f} s/step)."
        )
    out += [
        "",
        "## Summary",
        "",
        "| recipe | seeds | trained at (evals) | loss at trained setting | loss at Euler M'=1 | cheapest within "
        f"+{TOL} (per seed) | final train CE | final reg | s/step | train s |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in order:
        rs = runs[r]
        t = rs[0]["trained"]
        out.append(
            f"| {r} | {len(rs)} | {t.replace(':', ' ')} ({evals(t)}) | {ms(d['grid'][t] for d in rs)} | "
            f"{ms(d['grid']['euler:1'] for d in rs)} | "
            + ", ".join(f"{d['cheapest']['setting'].replace(':', ' ')} ({d['cheapest']['evals']})" for d in rs)
            + f" | {ms(d['history'][-1]['task'] for d in rs)} | {ms((d['history'][-1]['reg'] for d in rs), 2)} | "
            f"{ms((d['s_per_step'] for d in rs), 2)} | {ms((d['train_s'] for d in rs), 0)} |"
        )
    keys = [key_of(*k) for k in GRID]
    out += [
        "",
        "## Val loss at every (solver, M') (field evaluations per forward), mean ± std over seeds",
        "",
        "| recipe | " + " | ".join(f"{k.replace(':', ' ')} ({evals(k)})" for k in keys) + " |",
        "|---|" + "---|" * len(keys),
    ]
    if pre:
        out.append("| pretrained (no fine-tuning) | " + " | ".join(f"{pre['grid'][k]:.3f}" for k in keys) + " |")
    for r in order:
        out.append(f"| {r} | " + " | ".join(ms(d["grid"][k] for d in runs[r]) for k in keys) + " |")
    print("\n".join(out))
    figure(runs, order, keys)


def figure(runs, order, keys):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    means = {r: {k: statistics.mean(d["grid"][k] for d in runs[r]) for k in keys} for r in order}
    low = min(min(v.values()) for v in means.values())
    high = min(max(max(v.values()) for v in means.values()), low + 1.0)  # cut divergent settings off at low + 1
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.8), sharey=True)
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for ax, solver in zip(axes, SOLVER_STAGES):
        ks = [k for k in keys if k.startswith(solver + ":")]
        for i, r in enumerate(order):
            ax.plot(
                [evals(k) for k in ks],
                [means[r][k] for k in ks],
                marker="o",
                color=colors[i % len(colors)],
                label=f"{r} (trained {runs[r][0]['trained'].replace(':', ' ')})",
            )
            t = runs[r][0]["trained"]
            if t.startswith(solver + ":"):  # the recipe's own trained setting, ringed
                ax.plot([evals(t)], [means[r][t]], marker="o", ms=12, mfc="none", color=colors[i % len(colors)])
        ax.set_xscale("log", base=2)
        ax.set_xticks([evals(k) for k in ks], [f"{evals(k)}\n(M'={k.split(':')[1]})" for k in ks])
        ax.set_title(f"{solver} ({SOLVER_STAGES[solver]} evaluation(s) per step)")
        ax.set_xlabel("field evaluations per forward")
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("validation loss (nats/char, Python text)")
    axes[0].set_ylim(low - 0.05, high + 0.05)
    axes[-1].legend(fontsize=8, loc="upper right")
    n = {len(runs[r]) for r in order}
    fig.suptitle(
        f"Fine-tuned GPT-2 char models, val loss vs field evaluations (mean over {'/'.join(map(str, sorted(n)))} "
        f"seed(s); ringed: trained setting; y cut at min + 1 nat)"
    )
    fig.tight_layout()
    FIGURES.mkdir(parents=True, exist_ok=True)
    path = FIGURES / "decoder_grid.png"
    fig.savefig(path, dpi=120)
    log("wrote", path)


# ------------------------------------------------------------------------------------------------ CLI


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--pretrain-steps", type=int, default=DEFAULT_PRETRAIN_STEPS)
    common.add_argument("--val-blocks", type=int, default=DEFAULT_VAL_BLOCKS)
    sub.add_parser("pretrain", parents=[common], help="train (or reuse) the checkpoint; write decoder__pretrained.json")
    r = sub.add_parser("run", parents=[common], help="fine-tune recipes")
    r.add_argument("names", nargs="+", choices=list(RECIPES))
    r.add_argument("--seeds", nargs="+", type=int, default=[1])
    r.add_argument("--steps", type=int, default=DEFAULT_STEPS, help="fine-tuning steps")
    r.add_argument("--force", action="store_true", help="ignore a stale .running claim")
    sub.add_parser("report", help="markdown tables to stdout and figures/decoder_grid.png")
    sub.add_parser("list")
    t = sub.add_parser("time", help="s/step of pretraining and of an M=4 fine-tuning step")
    t.add_argument("--n", type=int, default=5)
    args = p.parse_args(argv)
    if args.cmd == "list":
        for k, v in RECIPES.items():
            print(f"{k:12s} {v['note']}")
    elif args.cmd == "pretrain":
        cmd_pretrain(args)
    elif args.cmd == "run":
        cmd_run(args)
    elif args.cmd == "report":
        cmd_report(args)
    elif args.cmd == "time":
        cmd_time(args)


if __name__ == "__main__":
    main()
