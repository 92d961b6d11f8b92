"""The package layout: stages import only the stages below them, without cycles, at module level."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

import grimp
import pytest

from metatune.fileio import REPO_ROOT

PACKAGE = REPO_ROOT / "metatune"

# Function-local imports of metatune's own modules that stay, and why.
LOCAL_IMPORTS_ALLOWED = {
    # the CLI imports each command's stage when the command runs, so that `metatune --help` is instant
    "metatune/cli/": "keeps `metatune --help` fast",
    # TVM pickles the RPC server's init callback by reference: it must come from the package, not __main__
    "metatune/measure/rpc_server.py": "callback importable by its package name",
}


def _lint_imports(config: Path) -> subprocess.CompletedProcess:
    linter = Path(sys.executable).with_name("lint-imports")
    return subprocess.run([str(linter), "--config", str(config), "--no-cache"], capture_output=True, text=True,
                          cwd=REPO_ROOT, timeout=120, env={**os.environ, "PYTHONPATH": str(REPO_ROOT)})


def test_the_layers_contract_holds():
    out = _lint_imports(REPO_ROOT / "pyproject.toml")
    assert out.returncode == 0, out.stdout + out.stderr
    assert "1 kept, 0 broken" in out.stdout


def test_the_layers_contract_catches_an_upward_import(tmp_path):
    """The contract is not vacuous: a copy of the package in which a low stage imports the tuner breaks it."""
    copy = tmp_path / "metatune"
    subprocess.run(["cp", "-r", str(PACKAGE), str(copy)], check=True)
    (copy / "env" / "target.py").write_text((copy / "env" / "target.py").read_text() + "\nimport metatune.tune.tuner\n")
    (tmp_path / "pyproject.toml").write_text((REPO_ROOT / "pyproject.toml").read_text())
    linter = Path(sys.executable).with_name("lint-imports")
    out = subprocess.run([str(linter), "--config", str(tmp_path / "pyproject.toml"), "--no-cache"], capture_output=True,
                         text=True, cwd=tmp_path, timeout=120, env={**os.environ, "PYTHONPATH": str(tmp_path)})
    assert out.returncode != 0
    assert "metatune.env.target -> metatune.tune.tuner" in out.stdout


def _strongly_connected(graph: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's algorithm: the strongly connected components of a directed graph."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for succ in graph.get(node, ()):
            if succ not in index:
                visit(succ)
                low[node] = min(low[node], low[succ])
            elif succ in on_stack:
                low[node] = min(low[node], index[succ])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                component.append(top)
                if top == node:
                    break
            components.append(component)

    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10_000))
    for node in graph:
        if node not in index:
            visit(node)
    return components


def test_no_module_import_cycles():
    graph = grimp.build_graph("metatune", cache_dir=None)
    edges = {m: graph.find_modules_directly_imported_by(m) for m in graph.modules}
    cycles = [sorted(c) for c in _strongly_connected(edges) if len(c) > 1]
    assert cycles == []


def test_strongly_connected_finds_a_cycle():
    assert sorted(map(sorted, _strongly_connected({"a": {"b"}, "b": {"a"}, "c": {"a"}}))) == [["a", "b"], ["c"]]


def _function_local_imports(path: Path, root: Path = REPO_ROOT) -> list[str]:
    """`from metatune... import` / `import metatune...` statements inside functions of one module."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for inner in ast.walk(node):
                if isinstance(inner, ast.ImportFrom) and inner.level == 0 and (inner.module or "").startswith("metatune"):
                    found.append(f"{path.relative_to(root)}:{inner.lineno} from {inner.module}")
                elif isinstance(inner, ast.Import) and any(a.name.startswith("metatune") for a in inner.names):
                    found.append(f"{path.relative_to(root)}:{inner.lineno} import")
                elif isinstance(inner, ast.ImportFrom) and inner.level > 0:
                    found.append(f"{path.relative_to(root)}:{inner.lineno} relative import")
    return found


def test_metatune_modules_are_imported_at_module_level():
    local = [hit for path in sorted(PACKAGE.rglob("*.py"))
             for hit in _function_local_imports(path)
             if not any(hit.startswith(prefix) for prefix in LOCAL_IMPORTS_ALLOWED)]
    assert local == []


def test_the_function_local_import_scan_sees_one(tmp_path):
    sample = tmp_path / "sample.py"
    sample.write_text("import metatune\n\ndef f():\n    from metatune.fileio import write_atomic\n    return write_atomic\n")
    assert _function_local_imports(sample, tmp_path) == ["sample.py:4 from metatune.fileio"]


@pytest.mark.parametrize("package", ["env", "workload", "space", "measure", "dataset", "encode", "cost_model",
                                     "learn", "search", "tune", "zoo", "bench", "cli"])
def test_every_stage_has_tests_in_its_mirror_folder(package):
    assert (PACKAGE / package / "__init__.py").exists()
    assert sorted((REPO_ROOT / "tests" / package).glob("test_*.py")), f"tests/{package}/ holds no tests"


def test_help_does_not_import_tvm_or_torch():
    code = "import sys, metatune.cli; print(any(m in sys.modules for m in ('tvm', 'torch')))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.stdout.strip() == "False", out.stderr


def test_no_module_imports_another_modules_private_names():
    private = []
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("metatune"):
                private += [f"{path.relative_to(REPO_ROOT)}:{node.lineno} {a.name}" for a in node.names
                            if a.name.startswith("_") and not a.name.startswith("__")]
    assert private == []
