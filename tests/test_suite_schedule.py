"""The xdist schedule's tables (tests/conftest.py, tests/README.md) name files that exist, and every test
file that uses the hlo corpus's in-process cache is in its group (else two workers each make the corpus).
Pure file reads: fast."""

from __future__ import annotations

import re
from pathlib import Path

from tests.conftest import GROUPS, LONGEST_FIRST, work_unit

ROOT = Path(__file__).resolve().parent.parent
USES_CORPUS = re.compile(r"^\s*from tests(\.hlo_corpus| import hlo_corpus)", re.MULTILINE)


def test_the_tables_name_existing_files() -> None:
    for path in [*GROUPS, *(u for u in LONGEST_FIRST if u not in GROUPS.values())]:
        assert (ROOT / path).is_file(), f"tests/conftest.py names {path}, which does not exist"


def test_every_file_using_the_corpus_cache_is_in_its_group() -> None:
    users = sorted(f"tests/{p.name}" for p in (ROOT / "tests").glob("test_*.py") if USES_CORPUS.search(p.read_text()))
    assert len(users) >= 5, users
    assert [u for u in users if GROUPS.get(u) != "hlo corpus"] == []


def test_a_test_runs_with_its_file_or_its_group() -> None:
    assert work_unit("tests/test_fuzz.py::test_generator_is_deterministic_and_its_repro_is_the_graph") == \
        "tests/test_fuzz.py"
    assert work_unit("tests/test_hlo_corpus.py::test_corpus_text_round_trip[top_k-hlo]") == "hlo corpus"
