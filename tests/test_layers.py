"""The floors of the library: no module imports upward, and modules stay small.

Walks every module's imports with ``ast`` (module level and inside functions) and checks them
against the floors documented in ``docs/architecture.md``. Also walks every comparison: family
names are compared only inside ``bbqlib/quantizers/``, code layout names only there and in the
layout modules, and calibration never compares index kinds (it asks
:mod:`bbqlib.calibration.kinds`).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from paths import PACKAGE, ROOT

#: Floors, lowest first: a module may import its own floor and the ones below it.
FLOORS = [
    (
        "registry",
        (
            "bbqlib._version", "bbqlib._params", "bbqlib._deprecated", "bbqlib.encoding",
            "bbqlib.similarity",
        ),
    ),
    ("kernels", ("bbqlib._kernels",)),
    (
        "basics",
        (
            "bbqlib.packing", "bbqlib._validation", "bbqlib.transforms", "bbqlib.storage",
            "bbqlib.formats", "bbqlib.io",  # bbqlib.io: the shims of storage's and formats'
        ),
    ),
    # bbqlib.scoring holds only the shims of the modules now in layouts and search
    ("layouts+search", ("bbqlib.layouts", "bbqlib.search", "bbqlib.scoring")),
    ("quantizers", ("bbqlib.quantizers",)),
    ("indexes", ("bbqlib.index",)),
    (
        "applications",
        (
            "bbqlib.analysis", "bbqlib.integrations", "bbqlib.adapters", "bbqlib.distributed",
            "bbqlib.cli", "bbqlib.__main__", "bbqlib.runtime", "bbqlib.threads",
            "bbqlib.warmup", "bbqlib.datasets",
            "bbqlib.calibration",
        ),
    ),
]  # fmt: skip
#: The kernels import nothing of bbqlib but the registry (encoding, version) and themselves.
KERNEL_ALLOWED = ("bbqlib.encoding", "bbqlib._version", "bbqlib._kernels")
#: The longest module allowed (lines), and the known exceptions with their reason.
MAX_LINES = 520


def _module_name(path: Path) -> str:
    rel = path.relative_to(ROOT).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _modules():
    return sorted(p for p in PACKAGE.rglob("*.py") if "__pycache__" not in p.parts)


def _is_module(name: str) -> bool:
    path = ROOT / name.replace(".", "/")
    return path.with_suffix(".py").exists() or (path / "__init__.py").exists()


def _imports(path: Path) -> list[str]:
    """Absolute names of the bbqlib modules ``path`` imports (at any depth)."""
    name = _module_name(path)
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    out = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out += [a.name for a in node.names if a.name.split(".")[0] == "bbqlib"]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - node.level + 1]
                mod = ".".join(base + ([node.module] if node.module else []))
            else:
                mod = node.module or ""
            if mod.split(".")[0] != "bbqlib":
                continue
            subs = [f"{mod}.{a.name}" for a in node.names if _is_module(f"{mod}.{a.name}")]
            # ``from . import x`` imports the submodule x; ``from .m import f`` the module m
            out += subs if len(subs) == len(node.names) else [mod, *subs]
    return out


def _floor(module: str) -> int | None:
    best = None
    for i, (_, prefixes) in enumerate(FLOORS):
        for p in prefixes:
            if module == p or module.startswith(p + "."):
                best = i
    return best


def test_every_module_has_a_floor():
    missing = [_module_name(p) for p in _modules()
               if _module_name(p) != "bbqlib" and _floor(_module_name(p)) is None]  # fmt: skip
    assert not missing, f"modules without a floor (add them to FLOORS): {missing}"


@pytest.mark.parametrize("path", _modules(), ids=lambda p: _module_name(p))
def test_no_upward_import(path):
    name = _module_name(path)
    if name == "bbqlib":
        return  # the package root re-exports from every floor
    own = _floor(name)
    for imported in _imports(path):
        assert imported != "bbqlib", f"{name} imports the package root; import the module"
        if name.startswith("bbqlib._kernels"):
            assert imported.startswith(KERNEL_ALLOWED), f"kernel {name} imports {imported}"
        floor = _floor(imported)
        assert floor is not None and floor <= own, (
            f"{name} ({FLOORS[own][0]}) imports {imported} ({FLOORS[floor][0]}), a floor above"
        )


@pytest.mark.parametrize("path", _modules(), ids=lambda p: _module_name(p))
def test_modules_are_small(path):
    lines = len(path.read_text().splitlines())
    assert lines <= MAX_LINES, f"{_module_name(path)} has {lines} lines (> {MAX_LINES}): split it"


#: Code layout names (``Encoding.layout``) and index kinds (``Encoding.indexes``).
LAYOUTS = ("planes", "bytes", "segments")
INDEX_KINDS = ("flat", "ivf")
#: Where layout names may be compared: the registry, the packing and the layout modules.
LAYOUT_MODULES = ("bbqlib.encoding", "bbqlib.packing", "bbqlib.layouts")


def _strings(node) -> list[str]:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return [node.value]
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return [s for e in node.elts for s in _strings(e)]
    return []


def _compared_lines(source: str, names) -> list[int]:
    """Lines of every comparison (or match case) of a string literal in ``names``."""
    out = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Compare):
            found = [s for e in (node.left, *node.comparators) for s in _strings(e)]
        elif isinstance(node, ast.MatchValue):
            found = _strings(node.value)
        else:
            continue
        if set(found) & set(names):
            out.append(node.lineno)
    return out


def _compared(path: Path, names) -> list[str]:
    return [f"{_module_name(path)}:{n}" for n in _compared_lines(path.read_text(), names)]


def _outside(*prefixes: str):
    return [p for p in _modules()
            if not any(_module_name(p) == x or _module_name(p).startswith(x + ".")
                       for x in prefixes)]  # fmt: skip


def test_family_names_compared_only_in_the_family_folders():
    from bbqlib.encoding import FAMILIES

    found = [hit for p in _outside("bbqlib.quantizers") for hit in _compared(p, FAMILIES)]
    assert not found, f"family names compared outside bbqlib/quantizers (ask the family): {found}"


def test_layout_names_compared_only_in_layout_modules():
    found = [hit for p in _outside("bbqlib.quantizers", *LAYOUT_MODULES)
             for hit in _compared(p, LAYOUTS)]  # fmt: skip
    assert not found, f"layout names compared outside the layout modules (ask the row): {found}"


def test_calibration_asks_its_index_kinds():
    calibration = [p for p in _modules() if _module_name(p).startswith("bbqlib.calibration")]
    found = [hit for p in calibration for hit in _compared(p, INDEX_KINDS)]
    assert not found, f"index kinds compared in calibration (use calibration.kinds): {found}"


def test_the_comparison_walk_sees_comparisons():
    source = """
if kind == "flat" or "ivf" in kinds or layout in ("x", "planes") or name == other:
    pass
kind = "flat"
match family:
    case "saq":
        pass
"""
    assert sorted(_compared_lines(source, ("flat", "ivf", "planes", "saq"))) == [2, 2, 2, 6]


def _short_aliases() -> dict:
    """``{alias: {module, ...}}`` of every import under a one- or two-letter alias in the
    package, its tests and its benchmarks (``np`` and the like excepted)."""
    common = {"np", "pd", "mp", "nb", "sp", "pl", "da", "dd", "it", "st", "op", "os", "re", "ll"}
    found: dict = {}
    for folder in ("bbqlib", "tests", "benchmarks"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.ImportFrom):
                    names = [(a.asname, f"{node.module}.{a.name}") for a in node.names]
                elif isinstance(node, ast.Import):
                    names = [(a.asname, a.name) for a in node.names]
                else:
                    continue
                for alias, module in names:
                    if alias and len(alias) <= 2 and alias not in common:
                        found.setdefault(alias, set()).add(module.rsplit(".", 1)[-1])
    return found


def test_a_short_alias_names_one_module_everywhere():
    # K, KI, S ... read as the same module in every file, or not at all
    clashes = {a: sorted(m) for a, m in _short_aliases().items() if len(m) > 1}
    assert not clashes, f"one- or two-letter aliases naming different modules: {clashes}"
