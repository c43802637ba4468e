"""Fuzzing the HLO parser: truncated and mutated text must raise HloParseError, never crash or hang."""

from __future__ import annotations

import time

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import hlo
from tests.test_hlo_text import KITCHEN_SINK

SEED_TEXTS = [
    KITCHEN_SINK,
    "HloModule m, entry_computation_layout={(f32[2]{0})->(f32[2]{0}, s32[])}\n"
    "ENTRY %e (p: f32[2]) -> (f32[2], s32[]) {\n  %p = f32[2]{0} parameter(0)\n"
    "  %c = s32[] constant(-3)\n  ROOT %t = (f32[2]{0}, s32[]) tuple(f32[2]{0} %p, s32[] %c)\n}\n",
]


def _parse_or_parse_error(text: str) -> None:
    start = time.perf_counter()
    try:
        module = hlo.parse_module(text)
    except hlo.HloParseError as e:
        assert e.line >= 1 and e.column >= 1
        assert str(e).startswith(f"{e.line}:{e.column}: expected ")
    else:
        # Whatever parsed must print and re-parse to the same module.
        assert hlo.parse_module(module.to_text()) == module
    assert time.perf_counter() - start < 2.0, "parser took too long"


def test_every_truncation_is_a_clean_error() -> None:
    for text in SEED_TEXTS:
        for end in range(0, len(text), 3):
            _parse_or_parse_error(text[:end])


_MUTATION_CHARS = list("{}()[],=%:\"\\-.x_ \n0123456789afsu") + ["ROOT", "ENTRY", "{...}", "f32[]", "nan", "->"]


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    seed=st.sampled_from(SEED_TEXTS),
    edits=st.lists(
        st.tuples(st.floats(0, 1, exclude_max=True), st.integers(0, 4), st.sampled_from(_MUTATION_CHARS)),
        min_size=1, max_size=4,
    ),
)
def test_mutations_are_clean_errors(seed: str, edits: list) -> None:
    text = seed
    for where, delete, insert in edits:
        i = int(where * len(text))
        text = text[:i] + insert + text[i + delete:]
    _parse_or_parse_error(text)


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=200))
def test_arbitrary_text_is_a_clean_error(text: str) -> None:
    _parse_or_parse_error("HloModule m\n" + text)
