"""FusionPass on random programs: elementwise ops, broadcasts, reductions, dots, slices, concatenates, selects.

Each seeded program is fused under varied options; the result must verify,
evaluate to exactly the same arrays, respect the tuple-root rule of the code
generator, and be a fixed point of the pass. A few are also compiled.
"""

from __future__ import annotations

import random

import numpy as np
import pytest

import backends.cpu as cpu
import hlo
from hlo.opcodes import Opcode
from hlo.passes.fusion import FusionOptions, FusionPass
from tests.fusion_helpers import ADD

A, B, W = "f32[4,6]{1,0}", "f32[4]{0}", "f32[6,6]{1,0}"


def _unary(r, pick, name):
    op = r.choice(["negate", "exponential", "tanh", "abs", "sine"])
    return "A", [f"%{name} = {A} {op}({A} %{pick('A')})"]


def _binary(r, pick, name):
    op = r.choice(["add", "multiply", "maximum", "subtract"])
    return "A", [f"%{name} = {A} {op}({A} %{pick('A')}, {A} %{pick('A')})"]


def _vector(r, pick, name):
    op = r.choice(["add", "multiply"])
    return "B", [f"%{name} = {B} {op}({B} %{pick('B')}, {B} %{pick('B')})"]


def _broadcast(r, pick, name):
    return "A", [f"%{name} = {A} broadcast({B} %{pick('B')}), dimensions={{0}}"]


def _reduce(r, pick, name):
    return "B", [f"%{name} = {B} reduce({A} %{pick('A')}, f32[] %zero), dimensions={{1}}, to_apply=%add"]


def _dot(r, pick, name):
    return "A", [f"%{name} = {A} dot({A} %{pick('A')}, {W} %{pick('W')}), lhs_contracting_dims={{1}}, "
                 f"rhs_contracting_dims={{0}}"]


def _swap_halves(r, pick, name):
    return "A", [f"%{name}.l = f32[4,3]{{1,0}} slice({A} %{pick('A')}), slice={{[0:4], [0:3]}}",
                 f"%{name}.r = f32[4,3]{{1,0}} slice({A} %{pick('A')}), slice={{[0:4], [3:6]}}",
                 f"%{name} = {A} concatenate(f32[4,3]{{1,0}} %{name}.r, f32[4,3]{{1,0}} %{name}.l), dimensions={{1}}"]


def _select(r, pick, name):
    a, b = pick("A"), pick("A")
    return "A", [f"%{name}.p = pred[4,6]{{1,0}} compare({A} %{a}, {A} %{b}), direction=GT",
                 f"%{name} = {A} select(pred[4,6]{{1,0}} %{name}.p, {A} %{b}, {A} %{pick('A')})"]


def _transpose(r, pick, name):
    return "W", [f"%{name} = {W} transpose({W} %{pick('W')}), dimensions={{1,0}}"]


GENERATORS = [_unary, _unary, _binary, _binary, _binary, _vector, _broadcast, _reduce, _dot, _swap_halves,
              _select, _transpose]


def random_module(seed: int) -> hlo.HloModule:
    r = random.Random(seed)
    pools = {"A": ["x"], "B": ["v"], "W": ["w"]}
    lines = [f"%x = {A} parameter(0)", f"%v = {B} parameter(1)", f"%w = {W} parameter(2)", "%zero = f32[] constant(0)"]

    def pick(kind: str) -> str:  # mostly recent values, so chains form
        pool = pools[kind]
        return pool[-1 - min(int(r.expovariate(0.5)), len(pool) - 1)]

    for k in range(r.randint(5, 50)):
        kind, new = r.choice(GENERATORS)(r, pick, f"v{k}")
        lines += new
        pools[kind].append(f"v{k}")
    outs = r.sample(pools["A"], min(3, len(pools["A"]))) + r.sample(pools["B"], min(2, len(pools["B"])))
    shapes = [A if o in pools["A"] else B for o in outs]
    lines.append(f"ROOT %out = ({', '.join(shapes)}) tuple({', '.join(f'{s} %{o}' for s, o in zip(shapes, outs))})")
    result = ", ".join(s.split("{")[0] for s in shapes)
    return hlo.parse_module(f"HloModule random_{seed}\n{ADD}\nENTRY %main (x: f32[4,6], v: f32[4], w: f32[6,6]) "
                            f"-> ({result}) {{\n  " + "\n  ".join(lines) + "\n}\n")


def _args(seed: int) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [(rng.standard_normal(s) * scale).astype(np.float32) for s, scale in (((4, 6), .5), (4, .5), ((6, 6), .3))]


@pytest.mark.parametrize("seed", range(60))
def test_random_programs_keep_their_values(seed: int) -> None:
    module = random_module(seed)
    r = random.Random(seed + 1000)
    options = FusionOptions(multi_output=r.random() < 0.8, max_copies=r.randint(1, 4))
    out = FusionPass(options).run(module)
    hlo.verify(out)
    args = _args(seed)
    with np.errstate(all="ignore"):
        want = hlo.evaluate(module, *args)
        for got, ref in zip(hlo.evaluate(out, *args), want):
            np.testing.assert_array_equal(got, ref)
    for inst in out.entry.instructions:
        if inst.opcode is Opcode.FUSION:
            assert len({s.dims for s in inst.shape.leaves()}) == 1
    assert FusionPass(options).run(out) is out
    if seed % 20 == 0:
        for got, ref in zip(cpu.compile(out)(*args), want):
            np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-4, equal_nan=True)
