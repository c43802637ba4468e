"""FusionPass on every real XLA module of the corpus: same values, valid structure, and it compiles.

The pass runs on XLA's unoptimized HLO (stage ``hlo``); the result must verify,
evaluate to exactly the same arrays, respect the code generator's rule for
tuple roots (equal dims), be a fixed point of the pass, and compile with the
CPU backend to the evaluator's numbers. Already-fused input (stage
``optimized_hlo``) must come out unchanged in value. Compiling every case
and generating every optimized module take a while, so the default run
covers a representative set and the ``slow`` run covers them all.
"""

from __future__ import annotations

import numpy as np
import pytest

import backends.cpu as cpu
import hlo
from hlo.opcodes import Opcode
from hlo.passes.fusion import FusionPass
from tests.hlo_corpus.cases import CASES, CASES_BY_NAME
from tests.hlo_corpus.generate import case_args, hlo_text

REPRESENTATIVE = ["softmax", "log_softmax", "layer_norm", "l2_normalize", "mlp_2layer", "matmul_transpose",
                  "relu_gelu_chain", "reduce_sum_axes", "reduce_max_min", "argmax_argmin",
                  "reduce_logsumexp_variance", "conv2d_same_stride2", "add_sub_broadcast", "concat", "pad_constant"]
IDS = [c.name for c in CASES]


def _fused(name: str, stage: str = "hlo"):
    module = hlo.parse_module(hlo_text(name, stage))
    fusion = FusionPass()
    return module, fusion.run(module), fusion


def _assert_same(got, want, case, exact: bool) -> None:
    assert len(got) == len(want)
    for i, (g, w) in enumerate(zip(got, want)):
        assert g.shape == w.shape and g.dtype == w.dtype, f"result {i}"
        rtol, atol = case.tolerance(w.dtype)
        if exact or (rtol == 0 and atol == 0):
            np.testing.assert_array_equal(g, w, err_msg=f"result {i}")
        else:
            np.testing.assert_allclose(g.astype(np.float64), w.astype(np.float64), rtol=rtol, atol=atol,
                                       equal_nan=True, err_msg=f"result {i}")


@pytest.mark.parametrize("name", IDS)
def test_fusion_keeps_values_and_structure(name: str) -> None:
    module, out, fusion = _fused(name)
    hlo.verify(out)
    args = case_args(name)
    _assert_same(hlo.evaluate(out, *args), hlo.evaluate(module, *args), CASES_BY_NAME[name], exact=True)
    for comp in out.computations:
        for inst in comp.instructions:
            if inst.opcode is Opcode.FUSION:
                assert len({s.dims for s in inst.shape.leaves()}) == 1, f"%{inst.name}: tuple root of unequal dims"
    assert FusionPass().run(out) is out  # a fixed point
    refused = [d for d in fusion.decisions if not d.fused]
    assert all(d.reason for d in refused)


# XLA's optimized modules where the pass still finds something to fuse around existing fusions.
FUSED_FURTHER = ["tensor_scatter_nd_update", "tensor_array_loop", "reshape", "range_from_shape",
                  "while_loop_counter_acc"]


def _check_already_fused(name: str) -> None:
    module, out, _ = _fused(name, "optimized_hlo")
    hlo.verify(out)
    args = case_args(name)
    _assert_same(hlo.evaluate(out, *args), hlo.evaluate(module, *args), CASES_BY_NAME[name], exact=True)


@pytest.mark.parametrize("name", REPRESENTATIVE + FUSED_FURTHER)
def test_already_fused_input_keeps_its_values(name: str) -> None:
    _check_already_fused(name)


@pytest.mark.slow
@pytest.mark.parametrize("name", [n for n in IDS if n not in REPRESENTATIVE + FUSED_FURTHER])
def test_already_fused_corpus_keeps_its_values(name: str) -> None:
    _check_already_fused(name)


def _compile_and_compare(name: str) -> None:
    module, out, _ = _fused(name)
    case, args = CASES_BY_NAME[name], case_args(name)
    try:
        exe = cpu.compile(out)
    except (cpu.CodegenUnsupported, cpu.CompileError) as fused_error:  # every corpus module compiles unfused
        raise AssertionError(f"the fused module fails to compile: {fused_error}") from fused_error
    _assert_same(exe(*args), hlo.evaluate(module, *args), case, exact=False)


@pytest.mark.parametrize("name", REPRESENTATIVE)
def test_fused_representative_cases_compile_and_match(name: str) -> None:
    _compile_and_compare(name)


@pytest.mark.slow
@pytest.mark.parametrize("name", [n for n in IDS if n not in REPRESENTATIVE])
def test_fused_corpus_compiles_and_matches(name: str) -> None:
    _compile_and_compare(name)


@pytest.mark.parametrize("name, kinds", [
    ("softmax", ["kInput", "kLoop", "kInput", "kLoop"] * 2),  # XLA: 8 fusions, the same split
    ("layer_norm", ["kInput", "kInput", "kLoop"]),  # mean; variance + rsqrt epilogue; normalize
    ("mlp_2layer", ["kOutput", "kOutput"]),  # dot + bias + relu; dot + bias
])
def test_fusion_kinds_on_known_models(name: str, kinds: list[str]) -> None:
    _, out, fusion = _fused(name)
    assert [f.kind for f in fusion.fusions] == kinds
    assert [i.name for i in out.entry.instructions if i.opcode is Opcode.FUSION] == \
        [f"fusion.{k}" for k in range(len(kinds))]
