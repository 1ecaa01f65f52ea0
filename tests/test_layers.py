"""The layer rule of docs/architecture.md, read from every module's imports (ast, nothing imported): no module
imports a layer above its own, no import circle, and goose's own modules are imported at the top of a file
except in the faces (CLI, TUI, the Python API), which import late to keep start-up light."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("drafting", "goosecli", "tui")

# lower number = lower layer; a module may import its own layer and those below
LAYERS = {
    "drafting.errors": 0, "drafting.disk_cache": 0,
    "drafting.engine": 1,
    "drafting.engine.hf": 2, "drafting.engine.llama": 2,
    "drafting.sources": 3, "drafting.budget": 3,
    "drafting.speculators": 4,
    "drafting.machine": 5, "drafting.weights": 5, "drafting.models": 5,
    "drafting.baselines": 6,
    "drafting.api": 7, "drafting.chat": 7, "drafting.bench": 7, "drafting.integrations": 7, "drafting": 7,
    "goosecli": 8, "tui": 8,
}
# the engines sit beside each other, and what drafts (sources, budgets, speculators) reaches neither: a speculator
# runs unchanged on every engine
ENGINES = ("drafting.engine.hf", "drafting.engine.llama")
ENGINE_BLIND = ("drafting.engine", "drafting.sources", "drafting.budget", "drafting.speculators")
LATE_IMPORTS_ALLOWED = ("goosecli", "tui", "drafting.api", "drafting")


def layer_of(module: str) -> tuple[str, int]:
    parts = module.split(".")
    for n in range(len(parts), 0, -1):
        name = ".".join(parts[:n])
        if name in LAYERS:
            return name, LAYERS[name]
    raise AssertionError(f"{module} is in no layer of LAYERS")


def modules() -> dict[str, Path]:
    found = {}
    for pkg in PACKAGES:
        for path in sorted((ROOT / pkg).rglob("*.py")):
            parts = path.relative_to(ROOT).with_suffix("").parts
            name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
            found[name] = path
    return found


def imports(path: Path, known: set[str]) -> list[tuple[str, bool, int]]:
    """(imported goose module, whether the import is inside a function, line) for each import of goose's own."""
    out = []

    def visit(node, in_function):
        for child in ast.iter_child_nodes(node):
            inner = in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef))
            names = []
            if isinstance(child, ast.ImportFrom):
                assert child.level == 0, f"{path}:{child.lineno}: relative import"
                names = [f"{child.module}.{a.name}" for a in child.names] + [child.module]
            elif isinstance(child, ast.Import):
                names = [a.name for a in child.names]
            for name in names:
                if name.split(".")[0] not in PACKAGES:
                    continue
                # the module itself when a name is a module (from pkg import mod), else the module it is taken from
                target = name if name in known else name.rsplit(".", 1)[0] if "." in name else name
                if target in known:
                    out.append((target, in_function, child.lineno))
                    break
            visit(child, inner)

    visit(ast.parse(path.read_text()), False)
    return out


@pytest.fixture(scope="module")
def graph():
    mods = modules()
    return mods, {name: imports(path, set(mods)) for name, path in mods.items()}


def test_every_module_is_in_a_layer(graph):
    mods, _ = graph
    for name in mods:
        layer_of(name)


def test_no_module_imports_a_layer_above_its_own(graph):
    mods, edges = graph
    upward = []
    for name, targets in edges.items():
        here, rank = layer_of(name)
        for target, _, line in targets:
            there, other = layer_of(target)
            if other > rank:
                upward.append(f"{mods[name].relative_to(ROOT)}:{line} ({here}) imports {target} ({there})")
    assert not upward, "upward imports:\n" + "\n".join(upward)


def test_no_import_circle(graph):
    mods, edges = graph
    succ = {name: sorted({t for t, _, _ in targets if t != name and not name.startswith(t + ".")})
            for name, targets in edges.items()}
    state: dict[str, int] = {}
    stack: list[str] = []

    def walk(node):
        state[node] = 1
        stack.append(node)
        for nxt in succ[node]:
            if state.get(nxt) == 1:
                circle = stack[stack.index(nxt):] + [nxt]
                raise AssertionError("import circle: " + " -> ".join(circle))
            if nxt not in state:
                walk(nxt)
        stack.pop()
        state[node] = 2

    for name in sorted(succ):
        if name not in state:
            walk(name)


def test_goose_modules_are_imported_at_the_top_below_the_faces(graph):
    mods, edges = graph
    late = [f"{mods[name].relative_to(ROOT)}:{line} imports {target} inside a function"
            for name, targets in edges.items() if layer_of(name)[0] not in LATE_IMPORTS_ALLOWED
            for target, in_function, line in targets if in_function]
    assert not late, "\n".join(late)


def test_drafting_holds_few_modules_at_its_top():
    assert len(list((ROOT / "drafting").glob("*.py"))) <= 10


def _in(module: str, packages) -> bool:
    return any(module == p or module.startswith(p + ".") for p in packages)


def test_the_loop_and_what_drafts_know_no_engine(graph):
    """The decode loop, trees, acceptance, sampling and every speculator, source and budget import neither engine's
    folder, nor transformers or llama.cpp themselves: they run unchanged on both engines."""
    mods, edges = graph
    blind = [name for name in mods if _in(name, ENGINE_BLIND) and not _in(name, ENGINES)]
    assert "drafting.engine.decode" in blind and "drafting.speculators.goose" in blind
    found = [f"{mods[name].relative_to(ROOT)}:{line} imports {target}"
             for name in blind for target, _, line in edges[name] if _in(target, ENGINES)]
    for name in blind:
        for node in ast.walk(ast.parse(mods[name].read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module] if isinstance(node, ast.ImportFrom) and node.module else []
            found += [f"{mods[name].relative_to(ROOT)}:{node.lineno} imports {n}" for n in names
                      if n.split(".")[0] in ("transformers", "llama_cpp")]
    assert not found, "engine-specific imports in the engine-neutral core:\n" + "\n".join(found)


def test_the_engines_do_not_import_each_other(graph):
    mods, edges = graph
    crossed = [f"{mods[name].relative_to(ROOT)}:{line} imports {target}"
               for name, targets in edges.items() for target, _, line in targets
               for a, b in (ENGINES, ENGINES[::-1]) if _in(name, [a]) and _in(target, [b])]
    assert not crossed, "\n".join(crossed)
