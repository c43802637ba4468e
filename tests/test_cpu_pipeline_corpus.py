"""The corpus through the whole CPU pipeline: XLA's unoptimized HLO, optimized by our passes
(simplify, fusion, layout assignment), compiled, run, and compared with the evaluator on the
original module. Tolerances as in test_cpu_backend_corpus, with f32 relaxed to rtol 1e-4 /
atol 1e-5: fused reductions are vectorized (reassociated) and dots/convolutions run in oneDNN."""

from __future__ import annotations

import pytest

import hlo
from backends.cpu.pipeline import optimize
from tests.cpu_backend_util import assert_matches, compile_many, kernel_cache  # noqa: F401
from tests.hlo_corpus.cases import CASES
from tests.hlo_corpus.generate import case_args, hlo_text

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def optimized(kernel_cache):
    originals = {c.name: hlo.parse_module(hlo_text(c, "hlo")) for c in CASES}
    compiled = compile_many(((name, optimize(m)) for name, m in originals.items()), kernel_cache)
    return originals, compiled


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_optimized_corpus_module_matches_evaluator(case, optimized) -> None:
    originals, compiled = optimized
    args = case_args(case)
    got = compiled[case.name].get()(*args)
    want = hlo.evaluate(originals[case.name], *args)
    assert len(got) == len(want)
    for k, (g, w) in enumerate(zip(got, want)):
        loose = w.dtype.kind == "f" and w.dtype.itemsize >= 4  # ints, pred, f16, bf16: the default tolerances
        assert_matches([g], [w], rtol=1e-4 if loose else None, atol=1e-5 if loose else None,
                       what=f"{case.name} output {k}")
