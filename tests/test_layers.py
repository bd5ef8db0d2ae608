"""The floors of the library: no module imports upward, and modules stay small.

Walks every module's imports with ``ast`` (module level and inside functions) and checks them
against the floors documented in ``docs/architecture.md``.
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
