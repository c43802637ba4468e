"""The backends' import graph: ``backends/cpu`` and ``backends/cuda`` never import each other, and the
shared floor ``backends/codegen`` imports neither (issue 15: a third backend is a folder with a
dialect, strategies and a pipeline, and nothing else). Every ``.py`` is parsed, and every import in
it counts: absolute and relative, ``import x.y`` and ``from x import y`` (a submodule named in
``from backends import cpu`` too), at module level or inside a function, and
``importlib.import_module("...")`` with a literal name. Also: no module in ``backends/`` is over the
line budget (docs/STYLE: modules under ~500 lines).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
BACKENDS = ROOT / "backends"

# package -> the packages it must not import
FORBIDDEN = {
    "backends.cpu": ("backends.cuda",),
    "backends.cuda": ("backends.cpu",),
    "backends.codegen": ("backends.cpu", "backends.cuda"),
}

# Imports still to be removed by another part of issue 15, as (file, imported module): each must still
# be there (an entry that no longer matches fails, so the list only shrinks). Empty when done.
PENDING: set[tuple[str, str]] = set()

MAX_LINES = 500


def module_name(path: Path, root: Path = ROOT) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported_modules(path: Path, root: Path = ROOT) -> list[tuple[int, str]]:
    """(line, module) for every module ``path`` imports, relative imports resolved."""
    tree = ast.parse(path.read_text(), filename=str(path))
    package = module_name(path, root)
    if path.name != "__init__.py":
        package = package.rpartition(".")[0]
    out: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[:len(package.split(".")) - (node.level - 1)]
                base_name = ".".join(base + ([node.module] if node.module else []))
            else:
                base_name = node.module or ""
            subs = [f"{base_name}.{a.name}" for a in node.names if _is_module(root, f"{base_name}.{a.name}")]
            out += [(node.lineno, m) for m in subs or [base_name]]
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
              and node.func.attr == "import_module" and node.args and isinstance(node.args[0], ast.Constant)
              and isinstance(node.args[0].value, str)):
            out.append((node.lineno, node.args[0].value))
    return out


def _is_module(root: Path, name: str) -> bool:
    path = root.joinpath(*name.split("."))
    return path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()


def _within(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


def violations(root: Path = ROOT) -> list[tuple[str, int, str]]:
    """(file relative to ``root``, line, imported module) for every import the graph forbids."""
    found = []
    for package, banned in FORBIDDEN.items():
        folder = root.joinpath(*package.split("."))
        for path in sorted(folder.rglob("*.py")):
            rel = path.relative_to(root).as_posix()
            seen = set()
            for line, mod in imported_modules(path, root):
                if (line, mod) not in seen and any(_within(mod, b) for b in banned):
                    seen.add((line, mod))
                    found.append((rel, line, mod))
    return found


def test_backends_do_not_import_each_other() -> None:
    found = violations()
    unexpected = [f"{f}:{line}: imports {mod}" for f, line, mod in found if (f, mod) not in PENDING]
    assert not unexpected, "backend import graph broken (cpu <-/-> cuda, codegen imports neither):\n" + \
        "\n".join(unexpected)
    stale = sorted(PENDING - {(f, mod) for f, _, mod in found})
    assert not stale, f"PENDING lists imports that are gone, delete them: {stale}"


def test_the_checker_sees_every_form_of_import(tmp_path: Path) -> None:
    """The checker itself: each import form in a fake tree is reported with its file and line."""
    for pkg in ("backends", "backends/cpu", "backends/cuda", "backends/codegen"):
        (tmp_path / pkg).mkdir(parents=True, exist_ok=True)
        (tmp_path / pkg / "__init__.py").write_text("")
    (tmp_path / "backends/cuda/a.py").write_text(
        "import os\n"
        "import backends.cpu.codegen\n"
        "from backends.cpu import dialect\n"
        "from ..cpu.kernels import x\n"
        "from backends import cpu\n"
        "def f():\n"
        "    from backends.cpu.compiler import CompileError\n"
        "    import importlib\n"
        "    importlib.import_module('backends.cpu.runtime')\n"
        "from backends.codegen import buffer\n"
        "from . import kernels\n")
    (tmp_path / "backends/codegen/b.py").write_text("from ..cuda import dialect\nfrom .buffer import X\n")
    (tmp_path / "backends/cpu/c.py").write_text("import backends.cudart_helper\nimport backends.cuda\n")
    got = {(f, line) for f, line, _ in violations(tmp_path)}
    assert got == {("backends/cuda/a.py", n) for n in (2, 3, 4, 5, 7, 9)} | \
        {("backends/codegen/b.py", 1), ("backends/cpu/c.py", 2)}


@pytest.mark.parametrize("path", sorted(BACKENDS.rglob("*.py")), ids=lambda p: p.relative_to(ROOT).as_posix())
def test_backend_modules_stay_under_the_line_budget(path: Path) -> None:
    lines = len(path.read_text().splitlines())
    assert lines <= MAX_LINES, f"{path.relative_to(ROOT)} has {lines} lines (budget {MAX_LINES}): split it"
