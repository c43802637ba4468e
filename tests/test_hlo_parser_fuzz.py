"""Fuzzing the HLO text boundary: truncated and mutated text (hand-written modules and real XLA
dumps from ``tests/hlo_corpus``) must parse, or raise ``HloParseError``; what parses must print and
re-parse equal, and verify or raise ``HloVerifierError``. Any other exception, a NumPy warning (a
silently overflowed literal) or a slow parse is a bug.
"""

from __future__ import annotations

import functools
import re
import time
import warnings

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import hlo
from hlo.dtypes import PrimitiveType
from hlo.opcodes import CALLED_COMPUTATION_ATTRS, Opcode
from tests.test_hlo_text import KITCHEN_SINK

SEED_TEXTS = [
    KITCHEN_SINK,
    "HloModule m, entry_computation_layout={(f32[2]{0})->(f32[2]{0}, s32[])}\n"
    "ENTRY %e (p: f32[2]) -> (f32[2], s32[]) {\n  %p = f32[2]{0} parameter(0)\n"
    "  %c = s32[] constant(-3)\n  ROOT %t = (f32[2]{0}, s32[]) tuple(f32[2]{0} %p, s32[] %c)\n}\n",
]


def _check_boundary(text: str) -> None:
    """Only HloParseError / HloVerifierError may come out of parse + print + verify."""
    start = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        try:
            module = hlo.parse_module(text)
        except hlo.HloParseError as e:
            assert e.line >= 1 and e.column >= 1
            assert str(e).startswith(f"{e.line}:{e.column}: expected ")
        else:
            assert hlo.parse_module(module.to_text()) == module  # what parsed prints and re-parses the same
            try:
                hlo.verify(module)
            except hlo.HloVerifierError as e:
                assert str(e)
    assert time.perf_counter() - start < 2.0, "parser or verifier took too long"


def test_every_truncation_is_a_clean_error() -> None:
    for text in SEED_TEXTS:
        for end in range(0, len(text), 3):
            _check_boundary(text[:end])


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
    _check_boundary(text)


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=200))
def test_arbitrary_text_is_a_clean_error(text: str) -> None:
    _check_boundary("HloModule m\n" + text)


# --- mutations of real XLA dumps that keep the text well formed, so they reach the verifier -----------------

CORPUS_CASES = ("conv2d_same_stride2", "gather_nd", "scatter_nd", "tensor_array_loop", "argmax_argmin",
                "max_pool_grad", "one_hot", "dynamic_index")


@functools.lru_cache(maxsize=None)
def _corpus_texts() -> tuple[str, ...]:
    from tests.hlo_corpus.generate import STAGES, hlo_text  # imports TensorFlow

    return tuple(hlo_text(case, stage) for case in CORPUS_CASES for stage in STAGES)


# Each mutation is (pattern whose group 1 is replaced, replacements). Integers include the int64 bounds and
# one past them; element types include token; called-computation keys are swapped between opcodes.
_MUTATIONS = {
    "integer": (re.compile(r"(?<![\w.%])(-?\d+)(?![\w.])"),
                ["0", "1", "2", "-1", "7", "2147483648", "4611686018427387904", "9223372036854775807",
                 "9223372036854775808", "-9223372036854775808", "99999999999999999999"]),
    "element_type": (re.compile(r"\b([a-z]+\d*)\["), [t.value for t in PrimitiveType]),
    "dimensions": (re.compile(r"[a-z]\d*\[([\d,]*)\]"),
                   ["", "0", "9223372036854775807", "9223372036854775807,4", "2305843009213693952",
                    "4294967296,4294967296", "9223372036854775808", "1,0,9223372036854775807"]),
    "constant_type": (re.compile(r"= (\S+) constant\("), ["token[]", "(f32[], token[])", "f16[]", "u8[]", "c64[]"]),
    "opcode": (re.compile(r"= [^=\n]*?\b([a-z][a-z-]*)\("), [op.text for op in Opcode]),
    "attribute_key": (re.compile(r", ([a-z_]+)="), [*CALLED_COMPUTATION_ATTRS, "dimensions", "index", "window"]),
    "drop_attribute": (re.compile(r"(, [a-z_]+=(?:\{[^{}\n]*\}|[^,\n]*))"), [""]),
}


def _mutate(text: str, kind: str, where: float, choice: int) -> str:
    pattern, replacements = _MUTATIONS[kind]
    matches = list(pattern.finditer(text))
    if not matches:
        return text
    m = matches[int(where * len(matches))]
    return text[:m.start(1)] + replacements[choice % len(replacements)] + text[m.end(1):]


@pytest.fixture(scope="module")
def corpus_texts() -> tuple[str, ...]:
    return _corpus_texts()


@settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    seed=st.integers(0, 2 * len(CORPUS_CASES) - 1),
    edits=st.lists(st.tuples(st.sampled_from(sorted(_MUTATIONS)), st.floats(0, 1, exclude_max=True),
                             st.integers(0, 63)), min_size=1, max_size=3),
)
def test_corpus_mutations_raise_only_hlo_errors(corpus_texts: tuple[str, ...], seed: int, edits: list) -> None:
    text = corpus_texts[seed]
    for kind, where, choice in edits:
        text = _mutate(text, kind, where, choice)
    _check_boundary(text)
