"""The layout rules of docs/architecture.md, checked on the source: one concern per package (every
module named in its package's row of the architecture table), no module over 700 lines, no
function over 100 lines, no import cycles between modules (function-level imports included), the
allowed arrows between the stage packages and the backends -- backends named by string only in
the backend registry, counted as arrows -- and the application at most 4 import levels deep."""
from __future__ import annotations

import ast
import functools
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("identify", "twin", "robot")
MAX_LINES = 700
MAX_FUNCTION_LINES = 100
MAX_APP_LEVELS = 4
#: the one module that names backend modules by string (imported lazily, by name)
REGISTRY = "identify.backend.interface"
#: contract modules every stage may read: they import nothing of the project (the run folder's
#: file names: a run folder is read by the stages below the one that writes it)
CONTRACTS = {"identify.outputs.layout"}

#: package -> the identify packages it may import (besides itself); docs/architecture.md
ALLOWED = {
    "identify.common": set(),
    "identify.model": {"identify.common"},
    "identify.backend": {"identify.model", "identify.common"},
    "identify.excitation": {"identify.model", "identify.common"},
    "identify.estimation": {"identify.model", "identify.backend", "identify.common"},
    "identify.scenario": {"identify.model", "identify.backend", "identify.estimation",
                          "identify.common"},
    "identify.logs": {"identify.scenario", "identify.estimation", "identify.model",
                      "identify.backend", "identify.common"},
    "identify.validation": {"identify.estimation", "identify.model", "identify.backend",
                            "identify.common"},
    "identify.control": {"identify.model", "identify.backend", "identify.excitation",
                         "identify.estimation", "identify.scenario", "identify.common"},
    "identify.outputs": {"identify.common", "identify.model", "identify.backend",
                         "identify.excitation", "identify.estimation", "identify.validation",
                         "identify.scenario"},
    "identify.app": {"identify", "identify.common", "identify.model", "identify.backend",
                     "identify.excitation", "identify.estimation", "identify.scenario",
                     "identify.logs", "identify.validation", "identify.control",
                     "identify.outputs"},
    "identify": {"identify.model", "identify.backend", "identify.app", "identify.common"},
    "twin": {"identify", "identify.model", "identify.backend", "identify.common"},
    "robot": {"identify", "identify.model", "identify.backend", "identify.common"},
}


def _modules() -> dict[str, Path]:
    out = {}
    for pkg in PACKAGES:
        for f in (ROOT / pkg).rglob("*.py"):
            rel = f.relative_to(ROOT).with_suffix("")
            parts = list(rel.parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            out[".".join(parts)] = f
    return out


def _package_of(mod: str, modules: dict) -> str:
    """The package a module belongs to (a package's __init__ belongs to itself)."""
    f = modules[mod]
    return mod if f.name == "__init__.py" else mod.rsplit(".", 1)[0] if "." in mod else mod


def _imports(mod: str, modules: dict) -> set[str]:
    """Every project module `mod` imports, anywhere in the file (function level included)."""
    f = modules[mod]
    tree = ast.parse(f.read_text())
    pkg = mod if f.name == "__init__.py" else mod.rsplit(".", 1)[0]
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = pkg.split(".")[:len(pkg.split(".")) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            names = [target] + [f"{target}.{a.name}" for a in node.names]
        else:
            continue
        for n in names:
            while n and n not in modules:
                n = n.rsplit(".", 1)[0] if "." in n else ""
            if n and n != mod:
                out.add(n)
    return out


MODULES = _modules()
GRAPH = {m: _imports(m, MODULES) for m in MODULES}


def test_no_module_over_700_lines():
    long = {m: n for m, f in MODULES.items()
            if (n := len(f.read_text().splitlines())) > MAX_LINES}
    assert not long, f"modules over {MAX_LINES} lines: {long}"


def test_no_function_over_100_lines():
    long = []
    for m, f in MODULES.items():
        for node in ast.walk(ast.parse(f.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                n = node.end_lineno - node.lineno + 1
                if n > MAX_FUNCTION_LINES:
                    long.append(f"{m}.{node.name}: {n}")
    assert not long, f"functions over {MAX_FUNCTION_LINES} lines: {long}"


def _architecture_rows() -> dict[str, str]:
    """package -> its row of the table in docs/architecture.md ("| `identify.model` | owns ...")."""
    rows = {}
    for line in (ROOT / "docs" / "architecture.md").read_text().splitlines():
        cells = [c.strip() for c in line.split("|")]
        if len(cells) > 2 and cells[1].startswith("`") and cells[1].endswith("`"):
            rows[cells[1].strip("`")] = line
    return rows


def _nested(pkg: str) -> bool:
    """A package inside a stage or a backend (twin.ethercat, robot.drive)."""
    return pkg.count(".") >= (2 if pkg.startswith("identify") else 1)


def _concern_text(pkg: str) -> str:
    """Where the concern of package `pkg` is written, module by module: its row of the
    architecture table (a stage of identify), the backend's section of docs/architecture.md
    (twin, robot), or the docstring of a nested package's __init__."""
    if _nested(pkg):
        return ast.get_docstring(ast.parse(MODULES[pkg].read_text())) or ""
    if pkg in ("twin", "robot"):
        doc = (ROOT / "docs" / "architecture.md").read_text()
        start = doc.index(f"## {pkg}/")
        end = doc.find("\n## ", start + 1)
        return doc[start:end if end > 0 else None]
    return _architecture_rows().get(pkg, "")


def test_every_module_is_named_in_its_packages_concern():
    """The rule the old module cap stood for: a package holds one concern, and its documentation
    says which module holds which part of it (a module nobody can place fails here)."""
    missing = []
    for m, f in MODULES.items():
        if f.name in ("__init__.py", "__main__.py"):
            continue
        pkg, stem = _package_of(m, MODULES), m.rsplit(".", 1)[-1]
        text = _concern_text(pkg)
        named = any(f"`{x}`" in text for x in (stem, f"{stem}.py"))
        if not named and _nested(pkg):         # a docstring names its modules in plain words
            named = re.search(rf"\b{re.escape(stem)}\b", text) is not None
        if not named:
            missing.append(m)
    assert not missing, f"modules whose package documents no place for them: {missing}"


@functools.cache
def _by_name_imports() -> dict[str, set[str]]:
    """module -> the project modules it names in a string ("twin.backend:make_backend",
    "robot.config"): imports made by name, invisible to the import statements."""
    out: dict[str, set[str]] = {}
    for m, f in MODULES.items():
        for node in ast.walk(ast.parse(f.read_text())):
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                name = node.value.split(":")[0]
                if "." in name and name in MODULES and name.split(".")[0] in ("twin", "robot") and \
                        name.split(".")[0] != m.split(".")[0]:
                    out.setdefault(m, set()).add(name)
    return out


def test_backends_are_named_only_by_the_registry():
    named = _by_name_imports()
    bad = {m: sorted(v) for m, v in named.items() if m.startswith("identify") and m != REGISTRY}
    assert not bad, f"backend modules named outside {REGISTRY}: {bad}"
    assert named.get(REGISTRY), "the registry names no backend module: this test sees nothing"


def test_contract_modules_import_nothing_of_the_project():
    bad = {c: sorted(GRAPH[c]) for c in CONTRACTS if GRAPH[c]}
    assert not bad, bad


def test_app_is_at_most_four_levels_deep():
    """The longest chain of imports between identify.app's own modules (cli -> pipeline -> ...)."""
    app = {m for m in MODULES if m.startswith("identify.app.")}
    depth: dict[str, int] = {}

    def level(m: str) -> int:
        if m not in depth:
            depth[m] = 1 + max((level(d) for d in GRAPH[m] if d in app), default=0)
        return depth[m]
    worst = max(app, key=level)
    assert level(worst) <= MAX_APP_LEVELS, (worst, level(worst))


def test_no_import_cycles():
    """Tarjan's strongly connected components over module imports, function level included;
    a package's __init__ re-exporting its own modules is not a cycle of theirs."""
    graph = {m: {d for d in deps if not (MODULES[d].name == "__init__.py"
                                         and m.startswith(d + "."))}
             for m, deps in GRAPH.items()}
    index, low, stack, on, sccs = {}, {}, [], set(), []

    def strong(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph[v]:
            if w not in index:
                strong(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                sccs.append(sorted(comp))
    import sys
    sys.setrecursionlimit(10000)
    for v in graph:
        if v not in index:
            strong(v)
    assert not sccs, f"import cycles: {sccs}"


def _top(pkg: str) -> str:
    """The rule key of a package: identify.<stage> or the backend's top level."""
    parts = pkg.split(".")
    if parts[0] == "identify":
        return ".".join(parts[:2])
    return parts[0]


@pytest.mark.parametrize("pkg", sorted(ALLOWED))
def test_package_imports_only_what_it_may(pkg):
    bad = []
    for m in MODULES:
        if _top(_package_of(m, MODULES)) != pkg:
            continue
        for d in GRAPH[m] | _by_name_imports().get(m, set()):
            if d in CONTRACTS:
                continue
            dp = _top(_package_of(d, MODULES))
            if m == REGISTRY and dp in ("twin", "robot"):
                continue                    # the registry: the one by-name arrow to a backend
            if dp != pkg and (dp.startswith("identify") or dp in ("twin", "robot")) \
                    and dp not in ALLOWED[pkg] and not (pkg in ("twin", "robot") and dp == pkg):
                bad.append(f"{m} -> {d}")
    assert not bad, f"{pkg} imports what it must not: {bad}"


def test_core_never_imports_a_backend():
    bad = [f"{m} -> {d}" for m in MODULES if m.startswith("identify")
           for d in GRAPH[m] if d.split(".")[0] in ("twin", "robot")]
    assert not bad, bad


def test_public_imports_keep_working():
    from identify import Limits, Recording, RobotModel                   # noqa: F401
    from identify.backend import load_backend                            # noqa: F401
    from identify.excitation import ExcitationProblem, optimize_excitation  # noqa: F401
    from identify.model import RobotModel as R2
    from identify.scenario import load_scenario                          # noqa: F401
    assert R2 is RobotModel


@pytest.mark.parametrize("module", ["identify", "identify.excitation", "identify.model.arm",
                                    "identify.model.base_params"])
def test_module_entry_points_answer_help(module):
    """Every documented ``python -m`` entry point still runs after the stage layout."""
    import subprocess
    import sys
    r = subprocess.run([sys.executable, "-m", module, "--help"], capture_output=True, text=True,
                       cwd=ROOT, timeout=120)
    assert r.returncode == 0 and "usage" in r.stdout.lower(), (module, r.stdout, r.stderr)


_POINTER = re.compile(r":(?:func|mod|class|meth|data|attr|exc):`~?((?:identify|twin|robot)\.[\w.]+)`")


def _resolves(ref: str) -> bool:
    """A dotted pointer names a module, or an attribute / dataclass field inside one."""
    import importlib
    parts = ref.split(".")
    for k in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:k]))
        except ImportError:
            continue
        for a in parts[k:]:
            fields = getattr(obj, "__dataclass_fields__", {})
            if hasattr(obj, a):
                obj = getattr(obj, a)
            elif a in fields:
                obj = fields[a]
            else:
                return False
        return True
    return False


def test_docstring_pointers_resolve():
    """Every :func: / :mod: / :class: ... pointer to the project in the source names something that
    exists (a moved function leaves no stale pointer behind)."""
    stale = [f"{f.relative_to(ROOT)}:{ln}: {ref}" for m, f in MODULES.items()
             for ln, line in enumerate(f.read_text().splitlines(), 1)
             for ref in _POINTER.findall(line) if not _resolves(ref)]
    assert not stale, stale


def test_no_private_name_imported_across_modules():
    """A helper two modules share is public in the module that owns it (a `_name` imported from
    another module is the mark of a split by line count)."""
    bad = []
    for m, f in MODULES.items():
        for node in ast.walk(ast.parse(f.read_text())):
            if isinstance(node, ast.ImportFrom) and (node.level or (node.module or "").split(".")[0]
                                                     in PACKAGES):
                bad += [f"{m}: {node.module}.{a.name}" for a in node.names
                        if a.name.startswith("_") and not a.name.startswith("__")]
    assert not bad, bad
