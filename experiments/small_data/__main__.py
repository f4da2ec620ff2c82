"""`python -m experiments small_data time | run | work | report`: see the package docstring."""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

from . import __doc__ as DOC
from .jobs import RESULTS, WORK


def work(results: Path, settings: dict, poll_s: float = 20.0) -> None:
    """One worker: claims the next unfinished job (experiments.studies' claim folders), runs it, rebuilds the list
    (report seeds join it once their family's selection has finished)."""
    import torch

    from experiments.studies.workers import _claim

    from .jobs import build_jobs
    from .train import run_and_save

    torch.set_num_threads(1)
    while True:
        todo = [job for job in build_jobs(results) if not (results / f"{job.id}.json").exists()]
        if not todo:
            return
        job = next((job for job in todo if _claim(WORK, job)), None)  # type: ignore[arg-type]
        if job is None:  # the rest is claimed by live workers; their results may add report seeds
            time.sleep(poll_s)
            continue
        print(f"[{time.strftime('%H:%M:%S')}] {job.id} started", flush=True)
        rec = run_and_save(job, settings, results)
        print(
            f"[{time.strftime('%H:%M:%S')}] {job.id} done in {rec['wall_s']:.0f}s ({rec['s_per_step']:.2f} s/step; "
            f"best select {rec['best']['select_acc']:.1f} at step {rec['best']['step']}, "
            f"report {rec['report_acc']:.1f})",
            flush=True,
        )


def timing() -> dict:
    """s/step at M = 1 and M = 4 (lambda 0.1) on batches of the N = 2,048 slice, and one selection-slice pass."""
    import torch

    from .jobs import SETTINGS, Job
    from .train import build, data, evaluate, optimizer, pad, recipe_tokenizer, set_res

    torch.set_num_threads(1)
    tok = recipe_tokenizer()
    d = data(tok)
    ids, ys = d["train2048"]
    model = build(Job(2048, "ot", 1))
    opt = optimizer(model, 1e-5, 0.0)
    out = {}
    B = SETTINGS["batch"]
    for steps in (1, 4):
        set_res(model, "euler", steps)
        model.train()
        ts = []
        for i in range(5):
            x, m = pad(tok, ids[i * B : (i + 1) * B])
            t = time.time()
            o = model(input_ids=x, attention_mask=m, labels=torch.tensor(ys[i * B : (i + 1) * B]), output_reg=True)
            (o.loss + 0.1 * o.reg).backward()
            opt.step()
            opt.zero_grad()
            ts.append(time.time() - t)
        out[f"train M={steps} s/step"] = sorted(ts)[1:4]
        t = time.time()
        evaluate(model, tok, *d["select"], steps, SETTINGS["eval_batch"])
        out[f"selection pass M={steps} s"] = time.time() - t
    out["sizes"] = {k: len(v[0]) for k, v in d.items()}
    out["mean train length"] = sum(map(len, ids)) / len(ids)
    out["load"] = os.getloadavg()
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m experiments small_data", description=(DOC or "").split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    for name in ("run", "work"):
        p = sub.add_parser(name, help="train and evaluate every run" + (" (one process)" if name == "work" else ""))
        p.add_argument("--results", type=Path, default=RESULTS)
        p.add_argument("--set", default="{}", help="JSON of SETTINGS overrides (a smoke run)")
        if name == "run":
            p.add_argument("--workers", type=int, default=2, help="processes, one thread each, nice 10")
    sub.add_parser("time", help="s/step at M = 1 and 4, one selection pass (sizes the study)")
    p = sub.add_parser("report", help="docs/results/pretrained-small-data.{md,json} from the raw JSON")
    p.add_argument("--results", type=Path, default=RESULTS)
    p.add_argument("--docs", type=Path, default=Path("docs/results"))
    args = parser.parse_args(argv)
    if args.command == "time":
        print(json.dumps(timing(), indent=1))
        return 0
    if args.command == "report":
        from .report import report

        print(report(args.results, args.docs))
        return 0
    settings = json.loads(args.set)
    if args.command == "work" or args.workers <= 1:
        work(args.results, settings)
        return 0
    from experiments.studies.workers import start_workers

    WORK.mkdir(parents=True, exist_ok=True)
    (WORK / "logs").mkdir(exist_ok=True)
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}
    cmd = ["nice", "-n", "10", sys.executable, "-m", "experiments.small_data", "work", "--results", str(args.results)]
    start_workers([*cmd, "--set", args.set], WORK, args.workers, env)
    return 0


if __name__ == "__main__":
    sys.exit(main())
