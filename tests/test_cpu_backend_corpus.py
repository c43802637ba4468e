"""The whole XLA-dumped corpus runs through the CPU backend and matches the evaluator.

Every case of ``tests/hlo_corpus`` at both stages (XLA's unoptimized HLO, and its
optimized HLO with its own fusions) is compiled from scratch into the session's
kernel cache and run on the case's inputs; outputs must equal ``hlo.evaluate``'s
with the default tolerances of ``tests/cpu_backend_util.py`` (ints and pred exact,
f32 rtol 1e-5 / atol 1e-6). Measured: with atol 1e-6 the largest f32 deviation needs
rtol 3.1e-7 (conv2d_grad: summation order), every other module <= 1.2e-7, so the
tolerance leaves a margin of 30x; no case needs a looser one. The modules are traced by TF and
compiled once per session, two gcc processes at a time, tracing overlapped with
compiling.
"""

from __future__ import annotations

import hlo
import pytest

from tests.cpu_backend_util import check_module, compile_many, kernel_cache  # noqa: F401
from tests.hlo_corpus.cases import CASES
from tests.hlo_corpus.generate import STAGES, case_args, hlo_text

pytestmark = pytest.mark.slow  # ~200 cold compiles: about a minute on 2 cores

PARAMS = [pytest.param(case, stage, id=f"{case.name}-{stage}") for case in CASES for stage in STAGES]


@pytest.fixture(scope="module")
def corpus(kernel_cache):
    def modules():
        for case in CASES:
            for stage in STAGES:
                yield f"{case.name}-{stage}", hlo.parse_module(hlo_text(case, stage))

    return compile_many(modules(), kernel_cache)


@pytest.mark.parametrize("case, stage", PARAMS)
def test_corpus_module_matches_evaluator(case, stage: str, corpus) -> None:
    check_module(corpus[f"{case.name}-{stage}"].get(), case_args(case), what=f"{case.name}-{stage}")
