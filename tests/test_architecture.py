"""The layout rules of docs/architecture.md, checked on the source: package sizes, module sizes,
no import cycles between modules (function-level imports included), and the allowed arrows
between the stage packages and the backends."""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("identify", "twin", "robot")
MAX_LINES = 700
MAX_MODULES = 12

#: package -> the identify packages it may import (besides itself); docs/architecture.md
ALLOWED = {
    "identify.common": set(),
    "identify.model": {"identify.common"},
    "identify.backend": {"identify.model", "identify.common"},
    "identify.excitation": {"identify.model", "identify.common"},
    "identify.estimation": {"identify.model", "identify.backend", "identify.common"},
    "identify.scenario": {"identify.model", "identify.estimation", "identify.common"},
    "identify.logs": {"identify.scenario", "identify.estimation", "identify.model",
                      "identify.backend", "identify.common"},
    "identify.validation": {"identify.estimation", "identify.model", "identify.backend",
                            "identify.common"},
    "identify.control": {"identify.model", "identify.backend", "identify.excitation",
                         "identify.estimation", "identify.scenario", "identify.common"},
    "identify.app": {"identify", "identify.common", "identify.model", "identify.backend",
                     "identify.excitation", "identify.estimation", "identify.scenario",
                     "identify.logs", "identify.validation", "identify.control"},
    "identify": {"identify.model", "identify.backend", "identify.app"},
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


def test_no_package_over_12_modules():
    counts: dict[str, int] = {}
    for m, f in MODULES.items():
        if f.name != "__init__.py":
            counts[_package_of(m, MODULES)] = counts.get(_package_of(m, MODULES), 0) + 1
    big = {p: c for p, c in counts.items() if c > MAX_MODULES}
    assert not big, f"packages with more than {MAX_MODULES} modules: {big}"


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
        for d in GRAPH[m]:
            dp = _top(_package_of(d, MODULES))
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
