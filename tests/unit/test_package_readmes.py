"""Each package README names every module the package owns, and no other (issue 31).

A README's module table has one row per module, ``| `path.py` | what it owns |``, the path
relative to the package (``strategies/base.py``). ``__init__.py`` files and the generated
code under ``_gen/`` are not listed (a row for an ``__init__.py`` is allowed, not needed).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import layersched
import layersched_harness

#: The product's package and the harness's: each package of either has a README.
ROOTS = [Path(root.__file__).resolve().parent for root in (layersched, layersched_harness)]
READMES = sorted(readme for root in ROOTS for readme in root.glob("*/README.md"))
#: A row of a README's module table: ``| `_name.py` |`` or ``| `local/_state.py` |``.
ROW = re.compile(r"^\| `([A-Za-z0-9_/]+\.py)` \|", re.MULTILINE)


def owned_modules(package: Path) -> list[str]:
    """The package's modules, recursively, relative to it: no ``__init__.py``, no ``_gen/``."""
    return sorted(
        path.relative_to(package).as_posix()
        for path in package.rglob("*.py")
        if path.name != "__init__.py" and "_gen" not in path.relative_to(package).parts
    )


def test_every_package_has_a_readme() -> None:
    packages = sorted(p.parent for root in ROOTS for p in root.glob("*/__init__.py"))
    assert [r.parent for r in READMES] == packages, "a package has no README.md"


@pytest.mark.parametrize("readme", READMES, ids=lambda readme: readme.parent.name)
def test_the_readme_lists_every_module_of_its_package(readme: Path) -> None:
    listed = [name for name in ROW.findall(readme.read_text()) if Path(name).name != "__init__.py"]
    twice = sorted({name for name in listed if listed.count(name) > 1})
    assert not twice, f"{readme}: its module table lists {twice} more than once"
    owned = owned_modules(readme.parent)
    missing = sorted(set(owned) - set(listed))
    extra = sorted(set(listed) - set(owned))
    assert not missing and not extra, (
        f"{readme}: its module table (rows `| \\`path.py\\` | ... |`) is not the package's "
        f"modules: add rows for {missing}, remove rows for {extra}"
    )
