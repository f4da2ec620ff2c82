"""The README a newcomer reads: its "Use" snippet runs as written, offline, in a fresh interpreter; it speaks to users
(no issue numbers) and keeps set-up apart from the two headline commands."""

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
    snippet = re.search(r"```python\n(.*?)```", _section("Use"), re.S)[1]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
    proc = subprocess.run(
        [sys.executable, "-c", snippet], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    loss, task_loss, reg = map(float, proc.stdout.split()[-3:])
    assert reg > 0 and abs(loss - (task_loss + 0.1 * reg)) < 1e-5


def test_quick_start_sets_up_once_then_two_commands():
    blocks = re.findall(r"```bash\n(.*?)```", _section("Quick start (fresh machine, offline, CPU)"), re.S)
    assert "pip install -e" in blocks[0] and "download.pytorch.org/whl/cpu" in blocks[0]
    assert [b.strip() for b in blocks[1:]] == ["hf-ot train", "python -m pytest"]


def test_readme_and_docs_have_no_issue_numbers():
    docs = [README, *sorted((README.parent / "docs").glob("*.md"))]
    for path in docs:
        assert not re.search(r"\b[Ii]ssue\s*#?\d+", path.read_text()), path
