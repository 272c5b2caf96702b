"""The layering is written once, in pyproject.toml's import-linter contracts, and held into
the docs: the README's layer table and each package README's "may import" line are what
these contracts say (a stale one fails, printing the text to paste)."""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

import pytest

from layersched.generated import read_block

REPO = Path(__file__).resolve().parents[2]
PACKAGE_DIR = REPO / "src" / "layersched"
HARNESS_DIR = REPO / "harness" / "layersched_harness"
BLOCK = "layering"


def _contracts() -> list[dict[str, Any]]:
    data = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))
    contracts: list[dict[str, Any]] = data["tool"]["importlinter"]["contracts"]
    return contracts


def _layer_specs() -> list[str]:
    [layered] = [c for c in _contracts() if c["type"] == "layers"]
    specs: list[str] = layered["layers"]
    return specs


def _layers() -> list[list[str]]:
    """The layers contract, top first, each layer's modules (``a | b`` are independent of
    each other, ``a : b`` may import each other: import-linter's sibling syntax)."""
    return [[m.strip() for m in spec.replace("|", ":").split(":")] for spec in _layer_specs()]


def _root(module: str) -> Path:
    """The folder of the module's root package: the product's or the harness's."""
    return HARNESS_DIR if module.startswith("layersched_harness.") else PACKAGE_DIR


def _path(module: str) -> Path:
    return _root(module) / _short(module)


def _link(module: str) -> str:
    name = _short(module)
    target = f"{name}/" if _path(module).is_dir() else f"{name}.py"
    return f"[`{name}`]({_root(module).relative_to(REPO).as_posix()}/{target})"


def _short(module: str) -> str:
    return module.removeprefix("layersched_harness.").removeprefix("layersched.")


def _forbidden(module: str) -> list[str]:
    """What a contract forbids the module to import: one that names it, or one that names a
    package it is in and has no exceptions (which may be the module's)."""
    found: list[str] = []
    for contract in _contracts():
        sources = contract["source_modules"] if contract["type"] == "forbidden" else []
        inherited = any(module.startswith(f"{s}.") for s in sources)
        if module in sources or (inherited and not contract.get("ignore_imports")):
            found += [m for m in contract["forbidden_modules"] if m not in found]
    return found


def package_block(module: str) -> str:
    """The layering lines of one package's README."""
    layers = _layers()
    [index] = [i for i, layer in enumerate(layers) if module in layer]
    below = [_short(m) for layer in layers[index + 1 :] for m in layer]
    siblings = [_short(m) for m in layers[index] if m != module]
    independent = "|" in _layer_specs()[index]
    forbidden = _forbidden(module)
    lines = [
        f"Layer {index + 1} of {len(layers)}, counted from the top "
        "(pyproject.toml's import-linter contracts, checked by `make lint`).",
        f"May import: {', '.join(f'`{m}`' for m in below) or 'nothing of layersched'}.",
    ]
    if siblings:
        listed = ", ".join(f"`{m}`" for m in siblings)
        relation = "never imported by it" if independent else "which it may import"
        lines.append(f"Beside it, {relation}: {listed}.")
    if forbidden:
        lines.append(f"Never imports: {', '.join(f'`{m}`' for m in forbidden)}.")
    return "\n".join(lines)


def readme_block() -> str:
    """The README's table of the layers, top first."""
    rows = ["| layer | packages | may import |", "|---|---|---|"]
    layers = _layers()
    for i, layer in enumerate(layers):
        below = "the layers below" if i < len(layers) - 1 else "nothing of layersched"
        names = ", ".join(_link(m) for m in layer)
        rows.append(f"| {i + 1} | {names} | {below} |")
    return "\n".join(rows)


PACKAGES = [module for layer in _layers() for module in layer if _path(module).is_dir()]


@pytest.mark.parametrize("module", PACKAGES, ids=[_short(m) for m in PACKAGES])
def test_each_package_readme_says_what_it_may_import(module: str) -> None:
    readme = _path(module) / "README.md"
    assert readme.is_file(), f"{readme} is missing: every package has a README"
    want = package_block(module)
    assert read_block(readme, BLOCK) == want, f"{readme}: the layering block should read:\n{want}"


def test_the_readme_table_is_the_contracts() -> None:
    want = readme_block()
    assert read_block(REPO / "README.md", BLOCK) == want, f"README.md should read:\n{want}"


def test_every_package_is_in_the_layers() -> None:
    # a new package must take its place in the contract (and so in the docs)
    listed = {_short(m) for layer in _layers() for m in layer}
    for root in (PACKAGE_DIR, HARNESS_DIR):
        packages = {p.name for p in root.iterdir() if (p / "__init__.py").is_file()}
        assert packages <= listed, packages - listed
