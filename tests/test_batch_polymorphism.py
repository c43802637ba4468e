"""hlo.analysis.batch: which modules tile over their batch dimension, on hand-written HLO.

Each case is an HLO template with ``{b}`` for the batch size, parsed at batch 2 and 3. Accepted
cases are also evaluated: running the module at batch 5 row by row (five batch-1 evaluations)
must equal the batch-5 evaluation, which is what tiling relies on.
"""

from __future__ import annotations

import numpy as np
import pytest

import hlo
from hlo.analysis import NotBatchPolymorphic, batch_polymorphism


def _module(template: str, b: int):
    return hlo.parse_module("HloModule m\n\n" + template.format(b=b, b6=6 * b))


def _check(template: str, batched=(True,)):
    return batch_polymorphism(_module(template, 2), _module(template, 3), 2, 3, list(batched))


def _rows_equal_whole(template: str, batched, seed: int = 0) -> None:
    """Evaluating 5 rows at once equals evaluating each row alone (batch-1 modules)."""
    whole = _module(template, 5)
    one = _module(template, 1)
    rng = np.random.default_rng(seed)
    args = []
    for p, is_batched in zip(whole.entry.parameters, batched):
        args.append(rng.standard_normal(p.shape.dims).astype(p.shape.dtype.numpy))
    full = hlo.evaluate(whole, *args)
    proof = _check(template, batched)
    for r in range(5):
        row_args = [a[r:r + 1] if b else a for a, b in zip(args, batched)]
        part = hlo.evaluate(one, *row_args)
        for k, (x, y) in enumerate(zip(full, part)):
            if proof.outputs[k]:
                np.testing.assert_allclose(x[r:r + 1], y, rtol=1e-5, atol=1e-6)
            else:
                np.testing.assert_allclose(x, y, rtol=1e-5, atol=1e-6)


MLP = """
add {{ a = f32[] parameter(0)  b = f32[] parameter(1)  ROOT s = f32[] add(a, b) }}
ENTRY e {{
  x = f32[{b},4] parameter(0)
  w = f32[4,3] parameter(1)
  d = f32[{b},3] dot(x, w), lhs_contracting_dims={{1}}, rhs_contracting_dims={{0}}
  z = f32[] constant(0)
  zb = f32[{b},3] broadcast(z), dimensions={{}}
  r = f32[{b},3] maximum(d, zb)
  s = f32[{b}] reduce(r, z), dimensions={{1}}, to_apply=add
  t = f32[3,{b}] transpose(r), dimensions={{1,0}}
  u = f32[{b},3] transpose(t), dimensions={{1,0}}
  ROOT out = (f32[{b}], f32[{b},3], f32[4,3]) tuple(s, u, w)
}}
"""
TRANSPOSED_OUTPUT = MLP.replace("ROOT out = (f32[{b}], f32[{b},3], f32[4,3]) tuple(s, u, w)",
                                "ROOT out = (f32[{b}], f32[3,{b}], f32[4,3]) tuple(s, t, w)")

ACCEPTED = {
    "mlp_with_row_reduce": (MLP, (True, False)),
    "reshape_keeps_rows": ("""
ENTRY e {{
  x = f32[{b},2,3] parameter(0)
  r = f32[{b},6] reshape(x)
  ROOT o = (f32[{b},6]) tuple(r)
}}
""", (True,)),
    "slice_of_features": ("""
ENTRY e {{
  x = f32[{b},6] parameter(0)
  s = f32[{b},2] slice(x), slice={{[0:{b}], [1:5:2]}}
  ROOT o = (f32[{b},2]) tuple(s)
}}
""", (True,)),
    "gather_rows_of_a_table": ("""
ENTRY e {{
  table = f32[10,4] parameter(0)
  ids = s32[{b},3] parameter(1)
  g = f32[{b},3,4] gather(table, ids), offset_dims={{2}}, collapsed_slice_dims={{0}}, start_index_map={{0}}, index_vector_dim=2, slice_sizes={{1,4}}
  ROOT o = (f32[{b},3,4]) tuple(g)
}}
""", (False, True)),
    "tensordot_merges_rows_with_positions": ("""
ENTRY e {{
  x = f32[{b},6,4] parameter(0)
  w = f32[4,3] parameter(1)
  m = f32[{b}6,4] reshape(x)
  d = f32[{b}6,3] dot(m, w), lhs_contracting_dims={{1}}, rhs_contracting_dims={{0}}
  r = f32[{b},6,3] reshape(d)
  ROOT o = (f32[{b},6,3]) tuple(r)
}}
""".replace("{b}6", "{b6}"), (True, False)),
    "paired_batch_dot": ("""
ENTRY e {{
  q = f32[{b},5,4] parameter(0)
  k = f32[{b},5,4] parameter(1)
  s = f32[{b},5,5] dot(q, k), lhs_batch_dims={{0}}, rhs_batch_dims={{0}}, lhs_contracting_dims={{2}}, rhs_contracting_dims={{2}}
  ROOT o = (f32[{b},5,5]) tuple(s)
}}
""", (True, True)),
}


@pytest.mark.parametrize("name", sorted(ACCEPTED))
def test_accepted_modules_tile(name: str) -> None:
    template, batched = ACCEPTED[name]
    _rows_equal_whole(template, batched)


def test_mlp_proof_names_batched_outputs() -> None:
    proof = _check(MLP, (True, False))
    assert proof.parameters == (True, False)
    assert proof.outputs == (True, True, False)  # the weights pass through unbatched


REFUSED = {
    "an output with the batch at dim 1": (TRANSPOSED_OUTPUT, (True, False), "output 1 has its batch dimension at dim 1"),
    "reduce over the batch": ("""
add {{ a = f32[] parameter(0)  b = f32[] parameter(1)  ROOT s = f32[] add(a, b) }}
ENTRY e {{
  x = f32[{b},4] parameter(0)
  z = f32[] constant(0)
  s = f32[4] reduce(x, z), dimensions={{0}}, to_apply=add
  ROOT o = (f32[4]) tuple(s)
}}
""", (True,), "reduces over the batch dimension"),
    "a constant folded from the batch size": ("""
ENTRY e {{
  x = f32[{b},4] parameter(0)
  n = f32[] constant({b})
  nb = f32[{b},4] broadcast(n), dimensions={{}}
  d = f32[{b},4] divide(x, nb)
  ROOT o = (f32[{b},4]) tuple(d)
}}
""", (True,), "a constant depends on the batch size"),
    "iota numbering the rows": ("""
ENTRY e {{
  x = f32[{b},4] parameter(0)
  i = f32[{b},4] iota(), iota_dimension=0
  a = f32[{b},4] add(x, i)
  ROOT o = (f32[{b},4]) tuple(a)
}}
""", (True,), "iota along the batch dimension"),
    "a reshape merging rows": ("""
ENTRY e {{
  x = f32[{b},4] parameter(0)
  r = f32[4,{b}] reshape(x)
  ROOT o = (f32[4,{b}]) tuple(r)
}}
""", (True,), "merges the batch dimension with a dimension outside it"),
    "a dot contracting the batch": ("""
ENTRY e {{
  x = f32[{b},4] parameter(0)
  y = f32[{b},4] parameter(1)
  d = f32[4,4] dot(x, y), lhs_contracting_dims={{0}}, rhs_contracting_dims={{0}}
  ROOT o = (f32[4,4]) tuple(d)
}}
""", (True, True), "not along a paired batch dimension"),
    "a slice dropping rows": ("""
ENTRY e {{
  x = f32[{b},4] parameter(0)
  s = f32[1,4] slice(x), slice={{[0:1], [0:4]}}
  ROOT o = (f32[1,4]) tuple(s)
}}
""", (True,), "does not keep every row"),
    "reverse of the rows": ("""
ENTRY e {{
  x = f32[{b},4] parameter(0)
  r = f32[{b},4] reverse(x), dimensions={{0}}
  ROOT o = (f32[{b},4]) tuple(r)
}}
""", (True,), "reverses the batch dimension"),
    "a window across rows": ("""
add {{ a = f32[] parameter(0)  b = f32[] parameter(1)  ROOT s = f32[] add(a, b) }}
ENTRY e {{
  x = f32[{b},4] parameter(0)
  z = f32[] constant(0)
  w = f32[{b},4] reduce-window(x, z), window={{size=2x1 pad=1_0x0_0}}, to_apply=add
  ROOT o = (f32[{b},4]) tuple(w)
}}
""", (True,), "the window spans the batch dimension"),
    "a parameter not marked batched whose shape changes": ("""
ENTRY e {{
  x = f32[{b},4] parameter(0)
  ROOT o = (f32[{b},4]) tuple(x)
}}
""", (False,), "its shape changes with the batch size"),
}


@pytest.mark.parametrize("name", sorted(REFUSED))
def test_refused_modules_name_the_instruction_and_reason(name: str) -> None:
    template, batched, reason = REFUSED[name]
    with pytest.raises(NotBatchPolymorphic, match=reason):
        _check(template, batched)


def test_refused_cases_really_differ_row_by_row() -> None:
    """The refusals are not over-cautious: these modules do give other rows when run tile by tile."""
    for name in ("reduce over the batch", "a constant folded from the batch size", "iota numbering the rows"):
        template, batched, _ = REFUSED[name]
        with pytest.raises(AssertionError):
            whole, one = _module(template, 5), _module(template, 1)
            x = np.random.default_rng(1).standard_normal((5, 4)).astype(np.float32)
            full = hlo.evaluate(whole, x)[0]
            rows = np.concatenate([hlo.evaluate(one, x[r:r + 1])[0].reshape(1, -1) for r in range(5)])
            np.testing.assert_allclose(full.reshape(5, -1) if full.size == rows.size else full, rows, rtol=1e-5)


def test_probe_sizes_must_differ_and_exceed_one() -> None:
    m = _module(MLP, 2)
    with pytest.raises(ValueError, match="two distinct batch sizes > 1"):
        batch_polymorphism(m, m, 2, 2, [True, False])
    with pytest.raises(ValueError, match="two distinct batch sizes > 1"):
        batch_polymorphism(_module(MLP, 1), m, 1, 2, [True, False])
