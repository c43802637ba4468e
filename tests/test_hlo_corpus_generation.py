"""The HLO corpus cases are sane: TF eager and XLA (jit_compile) agree.

This validates each case's inputs and its stated tolerances, which other tests
use when comparing their own evaluation of the dumped HLO with TF eager.
"""

import os
import re
import sys

import numpy as np
import pytest

_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if _ROOT not in sys.path:  # allow plain `pytest` as well as `python -m pytest`
    sys.path.insert(0, _ROOT)

from tests.hlo_corpus.cases import CASES  # noqa: E402
from tests.hlo_corpus.generate import STAGES, case_args, hlo_text, tf_reference, xla_result  # noqa: E402


def test_case_count_and_names():
    names = [c.name for c in CASES]
    assert len(names) >= 48
    assert len(set(names)) == len(names)


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_eager_matches_xla(case):
    args = case_args(case)
    assert all(a.size <= 512 for a in args), "inputs must stay small"
    want = tf_reference(case)
    got = xla_result(case)
    assert len(got) == len(want)
    for k, (g, w) in enumerate(zip(got, want)):
        assert g.dtype == w.dtype, f"output {k}: dtype {g.dtype} != {w.dtype}"
        assert g.shape == w.shape, f"output {k}: shape {g.shape} != {w.shape}"
        rtol, atol = case.tolerance(w.dtype)
        if (rtol, atol) == (0.0, 0.0):
            np.testing.assert_array_equal(g, w, err_msg=f"{case.name} output {k}")
        else:
            np.testing.assert_allclose(
                g.astype(np.float64),
                w.astype(np.float64),
                rtol=rtol,
                atol=atol,
                equal_nan=True,
                err_msg=f"{case.name} output {k}",
            )


_HLO_TYPE = {
    "bool": "pred", "int8": "s8", "int16": "s16", "int32": "s32", "int64": "s64",
    "uint8": "u8", "uint16": "u16", "uint32": "u32", "uint64": "u64",
    "float16": "f16", "bfloat16": "bf16", "float32": "f32", "float64": "f64",
}


def _entry_param_types(text):
    m = re.search(r"^ENTRY %\S+ \((.*)\) -> ", text, re.M)
    assert m, "no ENTRY computation header"
    if not m.group(1):
        return []
    return [p.split(": ", 1)[1] for p in re.split(r", (?=[\w.\-]+: )", m.group(1))]


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_hlo_text_available(case):
    # Every case argument must stay an ENTRY parameter (XLA bakes arguments it
    # needs as compile-time constants into the module; no case may do that).
    want = [
        f"{_HLO_TYPE[np.dtype(a.dtype).name]}[{','.join(str(d) for d in a.shape)}]"
        for a in case_args(case)
    ]
    for stage in STAGES:
        text = hlo_text(case, stage)
        assert text.startswith("HloModule "), text[:80]
        assert "{...}" not in text, f"{case.name} [{stage}] has an elided constant"
        assert _entry_param_types(text) == want, f"{case.name} [{stage}]"
