"""Every example in README.md and docs/*.md runs as written, offline, on a clone after the quick start.

The code blocks of each page (```python, ```bash, ```sh, ```console) run in order in a folder laid out like a clone
of the repository, holding the quick start's run (`runs/quickstart`, trained once for all pages). Each Python block
runs in its own interpreter, as a reader would paste it; shell blocks run with `bash -e`. The test only shortens
training: a command that trains (`hf-ot train`, `hf-ot sweep`, a recipe script) gets `--set training.max_steps=2`
appended, the last `--set` of a key winning. A block preceded by `<!-- not run: REASON -->` is not run (it needs the
network, GPUs or several machines); one preceded by `<!-- needs: MODULE -->` runs where that optional package is
installed, as CI installs it.
"""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
from conftest import built_once

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
PAGES = [README, *sorted((ROOT / "docs").glob("*.md"))]
RUN_LANGUAGES = {"python", "bash", "sh", "console"}
FENCE = re.compile(r"^```([\w-]*)[^\n]*\n(.*?)^```[ \t]*$", re.M | re.S)
MARK = re.compile(r"<!--\s*(not run|needs):\s*(.*?)\s*-->\s*$")
TRAINS = re.compile(r"(\bhf-ot\s+(train|sweep)\b|\brecipes/\w+\.py\b)")
SHORT = "--set training.max_steps=2"
# the parts of a checkout a reader's commands may name; runs/ and caches are not carried over
SKIP_TOP = {".git", "runs", ".venv", ".venv-oldest", ".pytest_cache", ".mypy_cache", ".ruff_cache", "__pycache__"}


@dataclass
class Block:
    page: Path
    line: int
    language: str
    code: str
    not_run: str | None  # the reason given in the page
    needs: str | None  # an optional module

    def __str__(self) -> str:
        return f"{self.page.relative_to(ROOT)}:{self.line} ({self.language})"


def page_blocks(page: Path) -> list[Block]:
    text = page.read_text()
    blocks = []
    for match in FENCE.finditer(text):
        before = text[: match.start()].rstrip("\n").rsplit("\n", 1)[-1]
        mark = MARK.search(before)
        blocks.append(
            Block(
                page=page,
                line=text.count("\n", 0, match.start()) + 1,
                language=match[1],
                code=match[2],
                not_run=mark[2] if mark and mark[1] == "not run" else None,
                needs=mark[2] if mark and mark[1] == "needs" else None,
            )
        )
    return blocks


def _split_comment(line: str) -> tuple[str, str]:
    """A shell line and its trailing comment (a ` #` outside quotes)."""
    quote = None
    for i, char in enumerate(line):
        if quote:
            quote = None if char == quote else quote
        elif char in "'\"":
            quote = char
        elif char == "#" and (i == 0 or line[i - 1].isspace()):
            return line[:i].rstrip(), line[i:]
    return line, ""


def shortened(code: str) -> str:
    """The shell block with `--set training.max_steps=2` after every command that trains."""
    out, command = [], []
    for line in code.splitlines():
        command.append(line)
        if line.rstrip().endswith("\\"):
            continue
        *head, last = command
        body, comment = _split_comment(last)
        logical = " ".join([*head, body])
        if TRAINS.search(_split_comment(logical)[0]) and "<<" not in logical:
            last = f"{body} {SHORT}" + (f"  {comment}" if comment else "")
        out.extend([*head, last])
        command = []
    out.extend(command)
    return "\n".join(out) + "\n"


def console_commands(code: str) -> str:
    """The commands of a console transcript (lines after `$ `); the rest is output."""
    return "\n".join(line[2:] for line in code.splitlines() if line.startswith("$ ")) + "\n"


def clone_like(folder: Path) -> Path:
    """A folder laid out like a clone of the repository: links to its files, and a runs/ of its own."""
    folder.mkdir(parents=True)
    for entry in ROOT.iterdir():
        if entry.name not in SKIP_TOP and not entry.name.endswith(".egg-info"):
            (folder / entry.name).symlink_to(entry)
    return folder


def environment(home: Path) -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        HF_HUB_OFFLINE="1",
        HF_DATASETS_OFFLINE="1",
        TRANSFORMERS_OFFLINE="1",
        TOKENIZERS_PARALLELISM="false",
        MPLBACKEND="Agg",
        OMP_NUM_THREADS=env.get("OMP_NUM_THREADS", "1"),
        PATH=os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")]),
        PYTHONPATH=os.pathsep.join(p for p in [str(ROOT), env.get("PYTHONPATH", "")] if p),
    )
    env.pop("HF_TOKEN", None)  # pushes here are dry runs: no token of the machine's is used
    return env


def run_block(block: Block, cwd: Path, env: dict[str, str], index: int) -> None:
    if block.language == "python":
        script = cwd / f".docs_block_{index}.py"
        script.write_text(block.code)
        command = [sys.executable, str(script)]
    else:
        code = console_commands(block.code) if block.language == "console" else block.code
        command = ["bash", "-e", "-o", "pipefail", "-c", shortened(code)]
    proc = subprocess.run(
        command, cwd=cwd, env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=900
    )
    output = proc.stdout[-3000:] + "\n" + proc.stderr[-6000:]
    assert proc.returncode == 0, f"{block} failed (exit {proc.returncode}):\n{output}"
    # a block that asks to trust remote code would hang for a reader at the prompt
    assert "Do you wish to run the custom code" not in proc.stderr, f"{block} prompts for trust_remote_code"


def quick_start_block() -> Block:
    text = README.read_text()
    start = text.index("\n## Quick start\n")
    runnable = [b for b in page_blocks(README) if b.language in RUN_LANGUAGES and b.not_run is None]
    first = next(b for b in runnable if text.count("\n", 0, start) < b.line)
    assert first.code.split() == ["hf-ot", "train"], first.code
    return first


@pytest.fixture(scope="session")
def quick_start(tmp_path_factory) -> Path:
    """The README's quick start, run once (shortened; one run for all xdist workers, so the pages spread over them):
    the runs/quickstart every page's examples start from."""

    def build(root: Path) -> None:
        folder = clone_like(root / "quickstart")
        run_block(quick_start_block(), folder, environment(folder), 0)
        assert (folder / "runs" / "quickstart" / "model" / "config.json").is_file()

    return built_once(tmp_path_factory, "docs-quickstart", build) / "quickstart" / "runs"


@pytest.mark.parametrize("page", PAGES, ids=[str(p.relative_to(ROOT)) for p in PAGES])
def test_page_examples_run_as_written(page, quick_start, tmp_path):
    first = quick_start_block()
    blocks = [b for b in page_blocks(page) if b.language in RUN_LANGUAGES and b.not_run is None]
    runnable = [b for b in blocks if (b.page, b.line) != (first.page, first.line)]
    if not runnable:
        pytest.skip(f"{page.name} has no examples to run")
    folder = clone_like(tmp_path / "clone")
    shutil.copytree(quick_start, folder / "runs", symlinks=True)
    env = environment(folder)
    for index, block in enumerate(runnable, 1):
        if block.needs and importlib.util.find_spec(block.needs) is None:
            continue  # an optional extra this environment lacks (CI installs it)
        run_block(block, folder, env, index)


def test_blocks_not_run_are_few_and_say_why():
    skipped = [b for page in PAGES for b in page_blocks(page) if b.not_run is not None]
    assert all(b.not_run for b in skipped)
    assert len(skipped) <= 4, [str(b) for b in skipped]
    for page in PAGES:  # only the languages the test runs, or text/yaml/json that is shown, not run
        for b in page_blocks(page):
            assert b.language in RUN_LANGUAGES | {"text", "yaml", "json"}, f"{b}: fence language {b.language!r}"


def test_shortening_appends_to_training_commands_only():
    code = (
        "hf-ot train\n"
        "hf-ot evaluate runs/quickstart/model --config quickstart\n"
        "torchrun --nproc_per_node 2 recipes/causal_lm.py quickstart \\\n    --output-dir runs/x   # on CPU too\n"
        "hf-ot sweep quickstart --param model.ot.ot_lambda --values 0 1 --set 'a=\"#\"'\n"
    )
    assert shortened(code).splitlines() == [
        f"hf-ot train {SHORT}",
        "hf-ot evaluate runs/quickstart/model --config quickstart",
        "torchrun --nproc_per_node 2 recipes/causal_lm.py quickstart \\",
        f"    --output-dir runs/x {SHORT}  # on CPU too",
        f"hf-ot sweep quickstart --param model.ot.ot_lambda --values 0 1 --set 'a=\"#\"' {SHORT}",
    ]


def test_readme_is_a_front_page_that_links_every_docs_page():
    text = README.read_text()
    assert len(text.split()) <= 3000
    headings = re.findall(r"^## (.+)$", text, re.M)
    order = ["Install", "Quick start", "How it works", "Use from Python", "Train on your own data", "Commands"]
    assert [h for h in headings if h in order] == order, headings
    assert headings[-1] == "Where to read more"
    for page in PAGES[1:]:
        assert f"(docs/{page.name})" in text, f"README does not link docs/{page.name}"
