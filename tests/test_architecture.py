"""The layout's rules, read from the imports (ast; nothing is imported): no import cycle among hf_ot's modules, and
nothing below imports from above. Layers, bottom up:

  models   hf_ot/models, the flat folder that travels with checkpoints: imports only its siblings (`from .x import y`,
           the form transformers copies next to the weights), never the rest of hf_ot;
  library  hf_ot's other top-level modules (convert, registry, hub, cards, run folders, metrics, training, ...) and
           the package itself: never recipes or the CLI;
  recipes  hf_ot/recipes: never the CLI;
  cli      hf_ot/cli.
Research code (experiments/) and benchmarks/ sit outside the package: hf_ot never imports them.
Function-level (lazy) imports count too: a cycle through them is still a cycle in the design.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import hf_ot

pytestmark = pytest.mark.core  # the model, cache and generation tests: CI runs them on the oldest transformers too

PACKAGE = Path(hf_ot.__file__).resolve().parent
LAYERS = ("models", "library", "recipes", "cli")


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def imports(name: str) -> list[tuple[str, int, bool]]:
    """(imported module, line, whether it is `from .x import y` of a sibling) for every import in module `name`."""
    path = MODULES[name]
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found += [(alias.name, node.lineno, False) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, *([node.module] if node.module else [])])
            for alias in node.names:
                candidate = f"{base}.{alias.name}"
                sibling_form = node.level == 1 and node.module is not None
                found.append((candidate if candidate in MODULES else base, node.lineno, sibling_form))
    return found


def internal_graph() -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {name: set() for name in MODULES}
    for name in MODULES:
        for target, _, _ in imports(name):
            while target and target not in MODULES and "." in target:  # hf_ot.models.ot_flow.X -> its module
                target = target.rpartition(".")[0]
            if target in MODULES and target != name:
                graph[name].add(target)
    return graph


def layer(name: str) -> str:
    parts = name.split(".")
    if len(parts) > 1 and parts[1] in ("models", "recipes", "cli"):
        return parts[1]
    return "library"


def test_the_modules_are_found():
    assert {"hf_ot", "hf_ot.models.ot_flow", "hf_ot.recipes.config", "hf_ot.cli", "hf_ot.convert"} <= set(MODULES)


def test_no_import_cycle_among_hf_ot_modules():
    graph = internal_graph()
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                cycle = path[path.index(nxt) :] + [nxt]
                pytest.fail("import cycle: " + " -> ".join(cycle))
            if nxt not in state:
                visit(nxt)
        path.pop()
        state[node] = 2

    for name in sorted(graph):
        if name not in state:
            visit(name)


@pytest.mark.parametrize("name", [n for n in MODULES if layer(n) == "models"])
def test_the_model_folder_imports_only_its_siblings(name):
    """transformers copies the model code flat next to the weights, following `from .x import y` only: anything
    else hf_ot would be missing where the checkpoint is loaded with trust_remote_code."""
    for target, line, sibling_form in imports(name):
        if target.startswith("hf_ot"):
            assert target.startswith("hf_ot.models") and (sibling_form or name == "hf_ot.models"), (
                f"{MODULES[name].name}:{line} imports {target}: the model folder imports only its siblings, "
                "as `from .x import y`"
            )


@pytest.mark.parametrize("name", sorted(MODULES))
def test_nothing_imports_from_a_layer_above(name):
    own = LAYERS.index(layer(name))
    for target, line, _ in imports(name):
        if target.split(".")[0] in ("experiments", "benchmarks", "tests"):
            pytest.fail(f"{MODULES[name]}:{line} imports {target}: hf_ot never imports research code or benchmarks")
        if target == "hf_ot" or target.startswith("hf_ot."):
            above = LAYERS.index(layer(target))
            assert above <= own, (
                f"{MODULES[name].relative_to(PACKAGE.parent)}:{line} ({layer(name)}) imports {target} "
                f"({layer(target)}): nothing below imports from above"
            )


_SNAPSHOT = """
import json, sys
import transformers.trainer, peft, peft.auto
from peft import PeftModel

def snapshot():
    methods = {"PeftModel.save_pretrained": PeftModel.__dict__["save_pretrained"],
               "PeftModel.from_pretrained": PeftModel.__dict__["from_pretrained"].__func__}
    for name in dir(peft.auto):
        cls = getattr(peft.auto, name)
        if isinstance(cls, type) and issubclass(cls, peft.auto._BaseAutoPeftModel):
            methods[name + ".from_pretrained"] = cls.from_pretrained.__func__
    return ({k: id(v) for k, v in methods.items()}, [id(c) for c in transformers.trainer.DEFAULT_CALLBACKS],
            [id(f) for f in sys.meta_path], [id(h) for h in sys.path_hooks])

before = snapshot()
import hf_ot
after = snapshot()
print("RESULT" + json.dumps({"same": before == after, "before": repr(before), "after": repr(after)}))
"""


def test_importing_hf_ot_changes_nothing_in_transformers_or_peft():
    """`import hf_ot` registers its classes through public registration APIs and patches nothing: PEFT's save and
    load methods, transformers' default Trainer callbacks and Python's import machinery are the same objects before
    and after it (a fresh process, where none of hf_ot was imported yet)."""
    import json
    import subprocess
    import sys

    pytest.importorskip("peft")
    out = subprocess.run([sys.executable, "-c", _SNAPSHOT], capture_output=True, text=True, timeout=300)
    line = next((ln for ln in out.stdout.splitlines() if ln.startswith("RESULT")), None)
    assert line is not None, out.stderr[-3000:]
    result = json.loads(line[len("RESULT") :])
    assert result["same"], (result["before"], result["after"])
