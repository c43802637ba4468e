"""The documentation points at things that exist: links, file paths and design-note sections.

Checked in README.md, docs/*.md and every folder's README.md:

* relative Markdown links ``[text](path#anchor)`` resolve to a file or folder, and an anchor to a
  heading of the target (GitHub's slugs);
* file and folder paths mentioned in the text (``hlo/analysis/batch.py``, ``passes/fusion/``) exist,
  relative to the document's folder or the repository root; a path whose first part is neither a
  folder there nor the root's (``assets/...``, ``oneapi/dnnl/dnnl.h``) names something outside the
  repository and is not checked;
* bare Python file names in backticks (``pipeline.py``; in a folder's README also ``.h`` and ``.cc``)
  exist somewhere under the document's top-level folder (the whole repository for README.md and docs/).

A path may name a module attribute (``tests/gpu/cases.MODULES``); ``GENERATED`` lists what a command
writes at run time.

And in every source, test and document: a citation ``docs/design.md §N`` names a section that
docs/design.md has, and nothing cites the old, unversioned ``DESIGN.md``. Pure file reads, no imports
of the project: fast.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DESIGN = ROOT / "docs" / "design.md"
SKIP_DIRS = {".git", "__pycache__", "build", "dist", ".pytest_cache", "node_modules"}
SOURCE_SUFFIXES = (".py", ".md", ".h", ".cc", ".c", ".cu", ".txt", ".cfg", ".toml", ".ini")

LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
# A path: two or more parts joined by "/", not starting inside another word, path or placeholder.
PATH = re.compile(r"(?<![\w./~<$%{*-])((?:\.\./)*[A-Za-z_][\w.-]*(?:/[\w.-]+)+/?|[A-Za-z_][\w-]*/)(?![\w<*{])")
BARE_FILE = re.compile(r"`([A-Za-z_][\w-]*\.(?:py|h|cc))`")
GENERATED = {"tests/gpu/out"}  # tests/gpu/run.sh's output folder when $OUT is not set
CITATION = re.compile(r"design\.md,? §(\d+)")
SECTION = re.compile(r"^## (\d+)\. ", re.MULTILINE)


def documents() -> list[Path]:
    docs = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    for path in _walk(ROOT):
        if path.name == "README.md" and path.parent != ROOT:
            docs.append(path)
    return docs


def _walk(top: Path):
    for directory, dirs, files in os.walk(top):
        dirs[:] = sorted(d for d in dirs if d not in SKIP_DIRS and not d.startswith("."))
        for name in sorted(files):
            yield Path(directory) / name


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = heading.strip().lower().replace("`", "")
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(text: str) -> set[str]:
    """The anchors of every heading outside fenced code (repeated headings get ``-1``, ``-2``, ...)."""
    out: set[str] = set()
    fenced = False
    for line in text.splitlines():
        if line.lstrip().startswith("```"):
            fenced = not fenced
            continue
        m = re.match(r"#{1,6} (.+)", line)
        if m and not fenced:
            base = slug(m.group(1))
            name, k = base, 0
            while name in out:
                k += 1
                name = f"{base}-{k}"
            out.add(name)
    return out


def bases(doc: Path) -> list[Path]:
    """Where a document's relative paths may start: its folder, then the repository root."""
    return [doc.parent] if doc.parent == ROOT else [doc.parent, ROOT]


def link_problems(doc: Path, text: str) -> list[str]:
    problems = []
    for target in LINK.findall(text):
        if re.match(r"[a-z]+:", target):  # http:, https:, mailto:
            continue
        path_part, _, anchor = target.partition("#")
        resolved = (doc.parent / path_part).resolve() if path_part else doc
        if not resolved.exists():
            problems.append(f"{doc.relative_to(ROOT)}: link ({target}): {path_part} does not exist")
        elif anchor and resolved.suffix == ".md" and anchor not in anchors(resolved.read_text()):
            problems.append(f"{doc.relative_to(ROOT)}: link ({target}): {resolved.relative_to(ROOT)} "
                            f"has no heading #{anchor}")
    return problems


def path_problems(doc: Path, text: str) -> list[str]:
    problems = []
    starts = bases(doc)
    text = re.sub(r"\]\([^)\s]+\)", "]", text)  # link targets are link_problems' business
    for mention in sorted({m.rstrip(".") for m in PATH.findall(text)} - GENERATED):
        first = mention.lstrip("./").split("/")[0] if not mention.startswith("../") else None
        candidates = [base / mention for base in starts
                      if mention.startswith("../") or (base / first).is_dir()]
        if candidates and not any(c.exists() or _module_attribute(c) for c in candidates):
            problems.append(f"{doc.relative_to(ROOT)}: mentions {mention}, which does not exist")
    folder_readme = doc.parent not in (ROOT, ROOT / "docs")
    top = ROOT / doc.relative_to(ROOT).parts[0] if folder_readme else ROOT
    for name in sorted(set(BARE_FILE.findall(text))):
        if not folder_readme and not name.endswith(".py"):
            continue  # `cuda.h` in a document is a system header
        if not any(p.name == name for p in _walk(top)):
            problems.append(f"{doc.relative_to(ROOT)}: mentions `{name}`, which is in no folder under "
                            f"{top.relative_to(ROOT) if top != ROOT else 'the repository'}")
    return problems


def _module_attribute(path: Path) -> bool:
    """``dir/module.NAME``: an attribute of the module ``dir/module.py``."""
    stem = path.name.split(".")[0]
    return path.name != stem and (path.parent / f"{stem}.py").is_file()


def citation_problems(path: Path, text: str, sections: set[str]) -> list[str]:
    where = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path
    problems = [f"{where}: cites docs/design.md §{n}, which docs/design.md does not have"
                for n in CITATION.findall(text) if n not in sections]
    if path == DESIGN:  # its own cross-references are bare: "(§5)"
        problems += [f"{where}: refers to §{n}, which it does not have"
                     for n in re.findall(r"§(\d+)", text) if n not in sections]
    if re.search(r"(?<![\w/])DESIGN" r"\.md", text):
        problems.append(f"{where}: cites DESIGN" ".md, which is not in the repository (use docs/design.md)")
    return problems


def test_links_resolve() -> None:
    problems = [p for doc in documents() for p in link_problems(doc, doc.read_text())]
    assert not problems, "\n".join(problems)


def test_mentioned_paths_exist() -> None:
    problems = [p for doc in documents() for p in path_problems(doc, doc.read_text())]
    assert not problems, "\n".join(problems)


def test_design_citations_name_existing_sections() -> None:
    sections = set(SECTION.findall(DESIGN.read_text()))
    assert {"3", "4", "5", "8", "9"} <= sections  # what code, tests and benchmarks cite
    problems = []
    for path in _walk(ROOT):
        if path.suffix in SOURCE_SUFFIXES and path != Path(__file__).resolve():
            problems += citation_problems(path, path.read_text(errors="replace"), sections)
    assert not problems, "\n".join(problems)


def test_checks_report_what_is_wrong(tmp_path) -> None:
    """The checks above find a broken link, anchor, path, bare file name and citation (else they prove nothing)."""
    doc = ROOT / "hlo" / "README.md"  # a folder README: paths start at hlo/ or the root
    text = ("[a](../docs/nowhere.md) [b](../docs/design.md#no-such-heading) [c](../docs/design.md#4-shapes) "
            "`passes/fusion/missing.py` `passes/fusion/policy.py` `backends/nothing/` `assets/x.json` "
            "`not_a_module.py` `ir.py`")
    links = link_problems(doc, text)
    assert len(links) == 2 and "docs/nowhere.md does not exist" in links[0] and "#no-such-heading" in links[1]
    paths = path_problems(doc, text)
    assert paths == ["hlo/README.md: mentions backends/nothing/, which does not exist",
                     "hlo/README.md: mentions passes/fusion/missing.py, which does not exist",
                     "hlo/README.md: mentions `not_a_module.py`, which is in no folder under hlo"]
    cited = citation_problems(tmp_path / "x.py", "see docs/design.md §4 and docs/design.md §99; DESIGN" ".md",
                              {"4"})
    assert len(cited) == 2 and "§99" in cited[0] and "not in the repository" in cited[1]
    assert slug("## `tfxla wrap`: compile a SavedModel"[3:]) == "tfxla-wrap-compile-a-savedmodel"
