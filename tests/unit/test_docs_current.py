"""The README and docs say what the tree is today (issue 47).

* The testbed's retired release (Kubernetes v1.20.2, until 2026-11-26) appears only as
  history: every paragraph or table row that names it also dates it or calls it retired.
* The README's Testbeds section names the release and the containerd the testbed runs,
  read from where the build pins them (``src/kube-scheduler/go.mod`` through
  ``layersched.deploy``, ``containerd-download.yml`` through ``layersched_harness.testbed.builds``).
* The README's repository layout lists every top-level folder (each of ``src/``'s,
  ``install/``'s and ``harness/``'s), each with one of the five parts, and names no folder
  that does not exist.
* Every relative link of the README, the docs and the READMEs resolves: a moved file
  leaves no link behind.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from layersched.deploy import KUBERNETES_VERSION
from layersched_harness.testbed.builds import containerd_download

REPO = Path(__file__).resolve().parents[2]
README = REPO / "README.md"
#: The release the local testbed ran until it moved to Go modules.
RETIRED_RELEASE = "1.20.2"
#: What makes a mention of it history: its dates, or the word.
HISTORY = re.compile(r"2026-11-2\d|retired")
#: The parts a top-level folder belongs to.
PARTS = frozenset({"product", "harness", "install", "tests", "docs"})
#: Folders a checkout may hold that git ignores (.gitignore): not the tree's.
IGNORED = frozenset({"runs", "build", "dist", "__pycache__"})
#: A Markdown link's target: ``](path)`` or ``](path#anchor)``.
LINK = re.compile(r"\]\((?P<target>[^)\s#]+)(?:#[^)]*)?\)")
#: A fenced code block: its text is not Markdown, so no link.
FENCE = re.compile(r"^```.*?^```", re.MULTILINE | re.DOTALL)
#: A target with a scheme (``https:``, ``mailto:``) is no file of the tree.
SCHEME = re.compile(r"^[a-z][a-z0-9+.-]*:")
#: A row of the layout table: ``| `folder/` | part[, part] | what |``.
LAYOUT_ROW = re.compile(r"^\| `(?P<folder>[^`]+)/` \| (?P<parts>[a-z, ]+) \|", re.MULTILINE)


def ignored(path: Path) -> bool:
    """A folder git ignores (.gitignore): a checkout's, not the tree's."""
    return path.name in IGNORED or path.name.endswith(".egg-info")


def markdown_files() -> list[Path]:
    """The README, every page under docs/, and every package's and module's README."""
    readmes = (
        path
        for path in REPO.rglob("README.md")
        if not {".venv", "runs", ".testbed", "node_modules"} & set(path.relative_to(REPO).parts)
    )
    return sorted({*REPO.glob("docs/**/*.md"), *readmes})


def blocks(text: str) -> list[str]:
    """Paragraphs (blank-line separated), with each table row a block of its own."""
    out: list[str] = []
    for paragraph in re.split(r"\n\s*\n", text):
        rows = [line for line in paragraph.splitlines() if line.startswith("|")]
        rest = [line for line in paragraph.splitlines() if not line.startswith("|")]
        out.extend(rows)
        if rest:
            out.append("\n".join(rest))
    return out


def section(text: str, heading: str) -> str:
    """The body of the ``## heading`` section, up to the next ``## ``."""
    start = text.index(f"\n## {heading}\n")
    end = text.find("\n## ", start + 1)
    return text[start : end if end != -1 else len(text)]


@pytest.mark.parametrize("doc", markdown_files(), ids=lambda doc: doc.relative_to(REPO).as_posix())
def test_the_retired_release_appears_only_as_history(doc: Path) -> None:
    undated = [
        block
        for block in blocks(doc.read_text())
        if RETIRED_RELEASE in block and not HISTORY.search(block)
    ]
    assert not undated, (
        f"{doc.relative_to(REPO)}: Kubernetes v{RETIRED_RELEASE} named as if the testbed still "
        f"ran it; date it (until 2026-11-26) or say what runs now ({KUBERNETES_VERSION}):\n"
        + "\n---\n".join(undated)
    )


@pytest.mark.parametrize(
    ("text", "undated"),
    [
        # the README's testbed paragraph before issue 47: present tense, no date
        ("a real Kubernetes cluster: Kubernetes v1.20.2 built here from Debian's source", 1),
        # the same release as history: dated
        ("Kubernetes v1.20.2 from Debian's source | **live** until 2026-11-26", 0),
        # a table row is judged alone: the next row's date does not cover it
        ("| 1.20 | live (v1.20.2) |\n| 1.37 | live since 2026-11-27 |", 1),
    ],
    ids=["present-tense", "dated", "row-alone"],
)
def test_the_history_check_catches_a_present_tense_mention(text: str, undated: int) -> None:
    found = [b for b in blocks(text) if RETIRED_RELEASE in b and not HISTORY.search(b)]
    assert len(found) == undated


def test_the_readme_names_what_the_testbed_runs() -> None:
    testbeds = section(README.read_text(), "Testbeds")
    assert f"Kubernetes {KUBERNETES_VERSION}" in testbeds
    assert "Go modules" in testbeds
    assert f"containerd {containerd_download().version}" in testbeds
    assert RETIRED_RELEASE not in testbeds


#: Top-level folders the layout lists by their children (each child is a root of its own).
EXPANDED = ("src", "install", "harness")


def test_the_layout_lists_every_folder_with_its_part() -> None:
    layout = section(README.read_text(), "Repository layout")
    rows = {m["folder"]: m["parts"] for m in LAYOUT_ROW.finditer(layout)}
    top = {
        path.name
        for path in REPO.iterdir()
        if path.is_dir() and not path.name.startswith(".") and not ignored(path)
    }
    children = {
        f"{folder}/{path.name}"
        for folder in EXPANDED
        for path in (REPO / folder).iterdir()
        if path.is_dir() and not ignored(path)
    }
    assert set(rows) == (top - set(EXPANDED)) | children, "the layout's folders are not the tree's"
    for folder, parts in rows.items():
        named = {part.strip() for part in parts.split(",")}
        assert named and named <= PARTS, f"{folder}: parts {named}, expected some of {PARTS}"


def test_the_harness_python_is_a_root_of_its_own() -> None:
    # the product's package holds no harness package, and the layout names where they went
    layout = section(README.read_text(), "Repository layout")
    for name in ("testbed", "sim", "evidence"):
        assert not (REPO / "src" / "layersched" / name).exists(), f"src/layersched/{name}"
        assert (REPO / "harness" / "layersched_harness" / name).is_dir()
        assert f"`{name}/`" in layout, f"the layout does not say where {name}/ lives"


def broken_links(doc: Path) -> list[str]:
    """The relative link targets of ``doc`` that name no file or folder of the tree."""
    text = FENCE.sub("", doc.read_text(encoding="utf-8"))
    targets = (m["target"] for m in LINK.finditer(text))
    return [t for t in targets if not SCHEME.match(t) and not (doc.parent / t).exists()]


@pytest.mark.parametrize("doc", markdown_files(), ids=lambda p: p.relative_to(REPO).as_posix())
def test_every_relative_link_resolves(doc: Path) -> None:
    assert broken_links(doc) == [], f"{doc.relative_to(REPO)}: links to nothing"


def test_the_link_check_finds_a_broken_link(tmp_path: Path) -> None:
    doc = tmp_path / "README.md"
    (tmp_path / "there.md").write_text("x")
    doc.write_text(
        "[ok](there.md#a) [gone](gone/x.md) [web](https://example.com/y)\n"
        "```\n[fenced](nowhere.md)\n```\n"
    )
    assert broken_links(doc) == ["gone/x.md"]
