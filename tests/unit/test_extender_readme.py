"""The extender's README names every module the package owns, and no other (issue 31)."""

from __future__ import annotations

import re
from pathlib import Path

import layersched.extender

PACKAGE = Path(layersched.extender.__file__).resolve().parent
#: A row of the README's module table: ``| `_name.py` | ... |``.
ROW = re.compile(r"^\| `([A-Za-z0-9_]+\.py)` \|", re.MULTILINE)


def test_the_readme_lists_every_module_of_the_package() -> None:
    listed = ROW.findall((PACKAGE / "README.md").read_text())
    owned = sorted(path.name for path in PACKAGE.glob("*.py"))
    assert len(listed) == len(set(listed)), f"a module is listed twice: {listed}"
    assert sorted(listed) == owned, (
        f"{PACKAGE / 'README.md'}: its module table lists {sorted(listed)}, the package "
        f"holds {owned}: add or remove rows"
    )
