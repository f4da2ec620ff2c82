"""The README a newcomer reads: its first Python example computes the OT objective as it says, offline, in a fresh
interpreter; it speaks to users (no issue numbers), keeps set-up apart from the quick start's one command, and names
the test command CI runs. (tests/test_docs_examples.py runs every example of README and docs/.)"""

import os
import re
import subprocess
import sys
from pathlib import Path

README = Path(__file__).resolve().parents[1] / "README.md"


def _section(title: str) -> str:
    text = README.read_text()
    start = text.index(f"## {title}\n")
    end = text.find("\n## ", start + 1)
    return text[start : end if end > 0 else None]


def test_use_snippet_runs_as_written_offline(tmp_path):
    snippet = re.search(r"```python\n(.*?)```", _section("Use from Python"), re.S)[1]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
    proc = subprocess.run(
        [sys.executable, "-c", snippet], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    loss, task_loss, reg = map(float, proc.stdout.split()[-3:])
    assert reg > 0 and abs(loss - (task_loss + 0.1 * reg)) < 1e-5


def test_install_then_one_quick_start_command_and_the_test_command():
    install = re.findall(r"```bash\n(.*?)```", _section("Install"), re.S)
    assert len(install) == 1 and "pip install -e" in install[0] and "download.pytorch.org/whl/cpu" in install[0]
    quick_start = re.findall(r"```bash\n(.*?)```", _section("Quick start"), re.S)
    assert quick_start[0].strip() == "hf-ot train"
    ci = (README.parent / ".ci" / "run").read_text()
    command = re.search(r"^(python -m pytest\b.*?)\s*$", ci, re.M)[1]  # the suite, as CI runs it
    assert f"`{command}`" in _section("Where to read more")


def test_readme_and_docs_have_no_issue_numbers():
    docs = [README, *sorted((README.parent / "docs").glob("*.md"))]
    for path in docs:
        assert not re.search(r"\b[Ii]ssue\s*#?\d+", path.read_text()), path
