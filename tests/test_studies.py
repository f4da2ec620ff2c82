"""experiments.studies at toy scale: the M' x solver grid against a model loaded with those settings and a
hand-computed loss, field evaluations counted on the blocks, the SST-2 noise, the seed statistics, the job list; and
for every study of `python -m experiments`: its modules import, its hf_ot imports resolve, the entry reaches it."""

from __future__ import annotations

import ast
import importlib
import importlib.util
import pkgutil
import statistics
from pathlib import Path

import pytest
import torch
from helpers import TOY_SCRATCH_LM
from transformers import AutoModelForCausalLM, AutoTokenizer

from experiments import STUDIES, studies
from experiments.__main__ import available
from experiments.__main__ import main as experiments_main

TINY_LM = [
    *TOY_SCRATCH_LM,
    "data.block_size=16",
    "data.max_eval_blocks=4",
    "training.max_steps=2",
    "training.per_device_train_batch_size=2",
    "training.logging_steps=1",
    "evaluation.batch_size=2",
]


@pytest.fixture(scope="module")
def elastic_run(tmp_path_factory):
    """One tiny OT (paper mode, no LayerNorms) training run through the study code, with a small M' x solver grid."""
    tmp = tmp_path_factory.mktemp("study")
    text = tmp / "text.txt"
    text.write_text("To be, or not to be, that is the question: whether 'tis nobler in the mind to suffer. " * 40)
    job = studies.Job(
        "ot_toy_s1", "lm", studies.CONFIGS["ot"], [*TINY_LM, f"data.train_file={text}"], 1, ["elasticity"], elastic=True
    )
    result = studies.run_lm(job, tmp, grid=((1, 3), ("euler", "rk4")))
    return tmp / "runs" / job.id / "model", text, result


def hand_loss(model, tokenizer, text_path, block: int = 16, blocks: int = 4) -> float:
    """Mean next-token cross-entropy over the first validation blocks (last 10% of the text), written out."""
    text = text_path.read_text()
    val = text[int(len(text) * 0.9) :]
    ids = tokenizer(val, add_special_tokens=False)["input_ids"]
    rows = torch.tensor([ids[i : i + block] for i in range(0, len(ids) - block + 1, block)][:blocks])
    with torch.no_grad():
        logits = model(input_ids=rows[:, :-1]).logits
    logp = torch.log_softmax(logits.double(), -1)
    return -logp.gather(-1, rows[:, 1:, None]).mean().item()


@pytest.mark.parametrize("steps, solver", [(1, "euler"), (3, "rk4")])
def test_grid_equals_loading_with_those_settings(elastic_run, steps, solver):
    folder, text, result = elastic_run
    # the feature a user calls: M' and solver given at load time
    model = AutoModelForCausalLM.from_pretrained(
        folder, trust_remote_code=True, ot_num_steps=steps, ot_solver=solver
    ).eval()
    assert (model.config.ot_num_steps, model.config.ot_solver) == (steps, solver)
    cell = next(e for e in result["elastic"] if e["num_steps"] == steps and e["solver"] == solver)
    assert cell["loss"] == pytest.approx(hand_loss(model, AutoTokenizer.from_pretrained(folder), text), abs=1e-5)


def test_grid_changes_the_model_and_restores_the_trained_setting(elastic_run):
    folder, text, result = elastic_run
    losses = {(e["num_steps"], e["solver"]): e["loss"] for e in result["elastic"]}
    assert losses[(1, "euler")] != pytest.approx(losses[(3, "euler")], abs=1e-6)  # M' really changed
    trained = AutoModelForCausalLM.from_pretrained(folder, trust_remote_code=True).eval()
    assert (trained.config.ot_num_steps, trained.config.ot_solver) == (5, "euler")
    assert result["loss"] == pytest.approx(hand_loss(trained, AutoTokenizer.from_pretrained(folder), text), abs=1e-5)


@pytest.mark.parametrize("steps, solver", [(2, "euler"), (2, "heun"), (3, "rk4")])
def test_field_evaluations_counted_on_the_blocks(elastic_run, steps, solver):
    folder, _, _ = elastic_run
    model = AutoModelForCausalLM.from_pretrained(
        folder, trust_remote_code=True, ot_num_steps=steps, ot_solver=solver
    ).eval()
    calls = []
    model.transformer.h[0].register_forward_hook(lambda *args: calls.append(1))
    with torch.no_grad():
        model(input_ids=torch.tensor([[3, 4, 5, 6]]))
    assert len(calls) == studies.field_evaluations(steps, solver)


def test_noise_spares_special_tokens_and_is_the_same_draw_every_time():
    ids = [[101] + [1000 + i for i in range(400)] + [102] for _ in range(5)]
    special = [[1] + [0] * 400 + [1] for _ in range(5)]
    assert studies.noisy_ids(ids, special, 0.0, 30000) == ids
    noisy = studies.noisy_ids(ids, special, 0.2, 30000)
    assert noisy == studies.noisy_ids(ids, special, 0.2, 30000)
    assert all(row[0] == 101 and row[-1] == 102 and len(row) == 402 for row in noisy)
    changed = sum(a != b for r, n in zip(ids, noisy) for a, b in zip(r, n)) / 2000
    assert 0.16 < changed < 0.24  # 2,000 Bernoulli(0.2) draws: std 0.009


def test_seed_statistics_and_sst2_summary():
    def record(seed, acc):
        return {
            "job": {"id": f"finetune_M2_lam0_s{seed}", "seed": seed},
            "result": {
                "accuracy": acc,
                "noise": {str(r): acc - r for r in studies.NOISE_RATES},
                "s_per_step": 1.0,
                "parameters": 10,
                "accuracy_before": 0.5,
            },
        }

    summary = studies.summarize([record(1, 0.80), record(2, 0.82), record(3, 0.84)])
    acc = summary["finetune"]["M2_lam0"]["accuracy"]
    assert acc["mean"] == pytest.approx(0.82) and acc["std"] == pytest.approx(0.02)  # sample std by hand
    assert summary["finetune"]["M2_lam0"]["noise"]["0.2"]["mean"] == pytest.approx(0.62)
    assert studies.stat([1.0])["std"] == 0.0 and statistics.stdev([1.0, 3.0]) == studies.stat([1.0, 3.0])["std"]


def test_job_list_shares_the_no_layernorm_lambda_1_runs():
    jobs = studies.build_jobs()
    ids = [j.id for j in jobs]
    assert len(ids) == len(set(ids)) == 3 * (3 + 4 + 7)  # per seed: 3 lambdas, 4 matched models, 7 SST-2 runs
    shared = [j for j in jobs if j.id.startswith("ot_noln_lam1_")]
    assert len(shared) == 3 and all(j.studies == ["elasticity", "matched"] for j in shared)
    only_matched = studies.build_jobs(studies=("matched",), seeds=(1,))
    assert [j.id for j in only_matched if j.id.startswith("ot_noln")] == ["ot_noln_lam1_s1"]
    assert not any(j.elastic for j in only_matched)


# ------------------------------------------------------------------ every study: its imports, its entry point

EXPERIMENTS = Path(__file__).resolve().parents[1] / "experiments"


def study_modules(name: str) -> list[str]:
    """The modules of study NAME: its package and every module in it but `__main__` (which the entry point's test
    runs: imported here first, runpy would warn that it is already imported)."""
    module = STUDIES[name][0]
    spec = importlib.util.find_spec(module)
    if spec is None:
        pytest.skip(f"{module} is not in this checkout")
    if spec.submodule_search_locations is None:
        return [module]
    inside = pkgutil.walk_packages(spec.submodule_search_locations, module + ".")
    return [module, *(m.name for m in inside if not m.name.endswith(".__main__"))]


@pytest.mark.parametrize("name", sorted(set(STUDIES) - {"paper"}))
def test_every_module_of_a_study_imports(name):
    for module in study_modules(name):
        importlib.import_module(module)


def project_imports(path: Path) -> list[tuple[int, str, list[str]]]:
    """Every import of hf_ot or experiments in the file, including those inside functions (a study imports lazily,
    so importing its module alone does not run them): (line, absolute module, names imported from it)."""
    package = ".".join(path.relative_to(EXPERIMENTS.parent).with_suffix("").parts[:-1])
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found += [(node.lineno, a.name, []) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            module = node.module or ""
            if node.level:
                base = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                module = f"{base}.{module}" if module else base
            found.append((node.lineno, module, [a.name for a in node.names]))
    return [f for f in found if f[1].split(".")[0] in ("hf_ot", "experiments")]


def test_every_hf_ot_import_of_the_studies_resolves():
    missing = []
    for path in sorted(EXPERIMENTS.rglob("*.py")):
        for line, module, names in project_imports(path):
            where = f"{path.relative_to(EXPERIMENTS.parent)}:{line}"
            try:
                imported = importlib.import_module(module)
            except ModuleNotFoundError:
                missing.append(f"{where}: {module}")
                continue
            for attr in names:
                if not hasattr(imported, attr) and importlib.util.find_spec(f"{module}.{attr}") is None:
                    missing.append(f"{where}: {module}.{attr}")
    assert not missing


def run_entry(capsys, *argv) -> tuple[int, str]:
    try:
        code = experiments_main(list(argv))
    except SystemExit as stop:  # argparse's --help
        code = stop.code or 0
    captured = capsys.readouterr()
    return code, captured.out + captured.err


def test_python_m_experiments_lists_every_study(capsys):
    code, out = run_entry(capsys)
    assert code == 0 and all(name in out for name in STUDIES)
    code, out = run_entry(capsys, "no_such_study")
    assert code == 2 and "overfit" in out


@pytest.mark.parametrize("name", sorted(STUDIES))
def test_python_m_experiments_reaches_each_study(capsys, name):
    if not available(STUDIES[name][0]):
        pytest.skip(f"{STUDIES[name][0]} is not in this checkout")
    code, out = run_entry(capsys, name, "--help")
    assert code == 0 and "usage" in out.lower()


# docs/results/studies.md "`python -m experiments.studies report --from docs/studies.json --out runs/studies ...`"
# redraws the studies' tables and figures. It failed with "AttributeError: 'NoneType' object has no attribute 'name'"
# (the noise figures' paths were plot_xy's return value, None), after rewriting docs/studies.json with this machine's
# versions in place of those of the machine that measured the runs.
def test_studies_report_from_the_docs_json_redraws_and_keeps_the_measuring_machine(tmp_path):
    import json
    from pathlib import Path

    from experiments.studies.__main__ import main as studies

    source = Path(__file__).parents[1] / "docs" / "studies.json"
    (docs := tmp_path / "docs").mkdir()
    assert studies(["report", "--from", str(source), "--out", str(tmp_path / "out"), "--docs", str(docs)]) == 0
    assert json.loads((docs / "studies.json").read_text()) == json.loads(source.read_text())
    assert {"study_sst2_noise.png", "study_matched_noise.png"} <= {p.name for p in (docs / "figures").iterdir()}


def _claim_in_process(args):
    """Claim jobs j0, j1, ... each at its own instant, the same for every process; the ids this process won."""
    import time
    from types import SimpleNamespace

    from experiments.studies.workers import _claim

    out, start, jobs = args
    won = []
    for i in range(jobs):
        time.sleep(max(0.0, start + 0.05 * i - time.time()))
        if _claim(Path(out), SimpleNamespace(id=f"j{i}")):  # a claim reads the job's id alone
            won.append(i)
    return won


@pytest.mark.slow
def test_one_of_many_workers_claiming_a_job_at_once_gets_it(tmp_path):
    """A claim is whole when it appears (its owner's pid inside): racing workers never both take the same job, and a
    claim whose owner is dead is taken over."""
    import multiprocessing
    import time

    with multiprocessing.get_context("spawn").Pool(6) as pool:
        won = pool.map(_claim_in_process, [(str(tmp_path), time.time() + 3.0, 40)] * 6)
    assert sorted(i for w in won for i in w) == list(range(40))  # every job claimed by exactly one worker
    (tmp_path / "claims" / "j0" / "pid").write_text("999999999")  # no such process
    assert _claim_in_process((str(tmp_path), 0.0, 1)) == [0]
