"""The floors of edgekit (docs/architecture.md), checked on the source: every ``import`` statement (at module
level or inside a function) of every module is read with ``ast`` and must point to the module's own floor or
one below. Nothing below the CLI imports the CLI; the core imports nothing of the pipelines."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
#: Import name prefix -> folder, as pyproject.toml's package-dir maps them.
PACKAGES = {
    "edgekit.device_agents": ROOT / "device_agents",
    "edgekit.quantize": ROOT / "quantize",
    "edgekit.targets": ROOT / "targets",
    "edgekit": ROOT / "sdk",
}
#: The floors, from the ground up (docs/architecture.md). A module not listed here fails the test: place it.
FLOORS: dict[str, int] = {
    "edgekit.device_agents": 0,
    "edgekit.core": 1,
    **{
        f"edgekit.core.{m}": 1
        for m in (
            "errors",
            "contrib",
            "irutil",
            "model",
            "passes",
            "runtime",
            "qdq_forms",
            "data",
            "array_sources",
            "metrics",
            "isolated",
            "litert_run",
            "exact",
            "lut",
            "qoperator",
            "sanity",
        )
    },  # fmt: skip
    "edgekit.quantize": 2,
    "edgekit.targets": 2,
    **{
        f"edgekit.{m}": 3
        for m in (
            "api",
            "deployment",
            "device_eval",
            "fleet",
            "report",
            "accuracy_report",
            "inspect",
            "docs_gen",
            "tradeoff",
        )
    },
    "edgekit.cli": 4,
}


def _module_name(path: Path) -> str:
    for prefix, folder in PACKAGES.items():
        if path.is_relative_to(folder):
            parts = list(path.relative_to(folder).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            return ".".join([prefix, *parts])
    raise AssertionError(path)


def _floor(module: str) -> int | None:
    """The floor of ``module`` (its longest listed prefix); None for the package root ``edgekit``."""
    best = max((p for p in FLOORS if module == p or module.startswith(p + ".")), key=len, default=None)
    return FLOORS[best] if best is not None else None


def _modules() -> list[tuple[str, Path]]:
    found = []
    for folder in PACKAGES.values():
        found += [(_module_name(p), p) for p in sorted(folder.rglob("*.py")) if ".venv" not in p.parts]
    return found


def _imports(path: Path, module: str) -> list[tuple[int, str]]:
    """``(line, imported module)`` for every import of an edgekit module in ``path``."""
    tree = ast.parse(path.read_text(), str(path))
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*parent, *([base] if base else [])])
            # ``from edgekit.core import passes`` imports the module edgekit.core.passes
            found += [(node.lineno, f"{base}.{a.name}" if base == "edgekit" else base) for a in node.names]
    return [(line, name) for line, name in found if name == "edgekit" or name.startswith("edgekit.")]


MODULES = _modules()


def test_the_walk_sees_every_package() -> None:
    names = {m for m, _ in MODULES}
    assert {"edgekit.cli.deploy_cmd", "edgekit.deployment", "edgekit.core.errors", "edgekit.quantize.pipeline",
            "edgekit.targets.tflite.converter", "edgekit.device_agents.agent"} <= names  # fmt: skip
    assert len(names) > 60


@pytest.mark.parametrize(("module", "path"), MODULES, ids=[m for m, _ in MODULES])
def test_imports_point_down(module: str, path: Path) -> None:
    own = _floor(module)
    assert own is not None or module == "edgekit", f"{module} is on no floor: add it to FLOORS"
    wrong = []
    for line, name in _imports(path, module):
        if name.startswith("edgekit.cli") and not module.startswith("edgekit.cli"):
            wrong.append(f"{path.name}:{line} imports {name}: nothing below the CLI imports it")
            continue
        target = _floor(name)
        if own is not None and target is not None and target > own:
            wrong.append(f"{path.name}:{line} (floor {own}) imports {name} (floor {target})")
    assert not wrong, "\n".join(wrong)


def test_the_check_catches_an_import_of_the_cli(tmp_path: Path) -> None:
    """The rule is real: a function-level import of the CLI in a core module is found."""
    bad = tmp_path / "model.py"
    bad.write_text(
        "def f():\n    from edgekit.cli.common import console\n    from edgekit import deployment\n"
    )
    assert _imports(bad, "edgekit.core.model") == [(2, "edgekit.cli.common"), (3, "edgekit.deployment")]
    assert _floor("edgekit.deployment") > _floor("edgekit.core.model")
