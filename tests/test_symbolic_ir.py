"""backends/codegen/symbolic.py without TensorFlow: fitting literals, generalizing probe sources, and the
verify points refusing sources whose sizes leaked into their structure."""

import pytest

from backends.codegen import symbolic
from backends.codegen.buffer_assignment import Arena
from backends.codegen.symbolic import NotSymbolic, Poly

GRID = symbolic.grid([[5, 12], [7, 14]])
GRID2 = symbolic.grid([[5, 12, 9], [7, 14, 11]])  # degree 2: squares too
VERIFY = [(19, 23), (10, 9)]


def test_fit_recovers_a_multilinear_polynomial_and_prints_c():
    poly = symbolic.fit(GRID, [4 * b * t + 64 for b, t in GRID])
    assert poly == Poly((((), 64), ((0, 1), 4)))
    assert poly((19, 23)) == 4 * 19 * 23 + 64
    assert poly.c() == "(INT64_C(64) + INT64_C(4)*tfxla_sym[0]*tfxla_sym[1])"
    assert poly.text(["s0", "s1"]) == "64 + s0*s1*4"
    assert symbolic.fit(GRID, [b for b, _ in GRID]).symbol == 0


def test_a_grid_of_three_values_fits_squares():
    values = [b * t * t * 4 for b, t in GRID2]  # the bytes of a [B, T, T] f32 matrix
    wrong = symbolic.fit(GRID, [b * t * t * 4 for b, t in GRID])  # degree 1 fits the grid, wrongly elsewhere:
    assert wrong.text(["s0", "s1"]) == "s0*-392 + s0*s1*84" and wrong((19, 23)) != 19 * 23 * 23 * 4  # verify points
    poly = symbolic.fit(GRID2, values)
    assert poly.text(["s0", "s1"]) == "s0*s1*s1*4" and poly((19, 23)) == 19 * 23 * 23 * 4


def test_fit_refuses_what_is_no_integer_polynomial():
    assert symbolic.fit(GRID, [(b * t) // 2 for b, t in GRID]) is None  # 35//2: the coefficients are not integers
    assert symbolic.fit(GRID, [-(-b * 12 // 64) * 64 for b, _ in GRID]) is None  # an aligned size


def _source(point, body):
    return "static int comp_0(void) {\n" + body(*point) + "\n}\n/*@tfxla_exports@*/\n"


def _generalized(body):
    template = symbolic.generalize(GRID, [_source(p, body) for p in GRID])
    for v in VERIFY:
        template.check(v, _source(v, body))
    return template


def test_generalize_turns_sizes_into_run_time_bounds():
    template = _generalized(lambda b, t: f"for (int64_t i = 0; i < {b * t}; ++i) x[i] = y[i * 16 + {t}] / {float(t)}f;")
    text = template.text()
    assert "i < (tfxla_sym[0]*tfxla_sym[1])" in text
    assert "y[i * 16 + (tfxla_sym[1])]" in text  # the constant 16 stays a constant
    assert "/ ((float)((tfxla_sym[1])))" in text


def test_generalize_takes_a_reciprocal_float():
    import numpy as np

    template = _generalized(lambda b, t: f"acc *= {float(np.float32(1.0 / t))}f;")
    assert "((float)1/(float)((tfxla_sym[1])))" in template.text()


@pytest.mark.parametrize("body, message", [
    (lambda b, t: "\n".join(f"x[{i}] = 0;" for i in range(t)), "structure"),  # a loop unrolled per size
    (lambda b, t: f'puts("size {t}");', "differ at"),  # a size in a string ("%d" % n)
    (lambda b, t: f"x = {float(t) ** 0.5}f;", "float literal"),  # a value computed from the size
    (lambda b, t: f"x = {(b * t) // 2};", "no polynomial"),
])
def test_generalize_refuses_sizes_leaked_into_the_text(body, message):
    with pytest.raises(NotSymbolic, match=message):
        _generalized(body)


def test_a_decision_the_grid_agrees_on_is_caught_at_a_verify_point():
    # Unrolled below 16, a loop above: the grid (5..14) never sees the loop, the verify point 19 does.
    def body(b, t):
        return f"for (i = 0; i < {t}; ++i) f(i);" if t > 16 else f"for (i = 0; i < {t}; i += 1) f(i);"

    template = symbolic.generalize(GRID, [_source(p, body) for p in GRID])
    with pytest.raises(NotSymbolic, match=r"verify point \(19, 23\)"):
        template.check((19, 23), _source((19, 23), body))


def test_arrays_sized_by_a_symbol_are_refused():
    with pytest.raises(NotSymbolic, match="static array"):
        _generalized(lambda b, t: f"static const float k_0[{t}] = {{0}};")
    with pytest.raises(NotSymbolic, match="stack array"):  # a row program's row, sized for small probes
        _generalized(lambda b, t: f"  float acc[{t}] __attribute__((aligned(64)));")


def test_probe_mode_gives_each_buffer_a_slot_and_arithmetic_on_one_is_refused():
    with symbolic.probing() as slots:
        arena = Arena()
        a = arena.allocate("a", 100, 0)
        arena.release("a", 1)
        b = arena.allocate("b", 40, 2)  # first fit would reuse a's block; a probe never does
    assert (f"{a}", f"{b}", slots.sizes, arena.size) == ("tfxla_off[0]", "tfxla_off[1]", [100, 40], 0)
    with pytest.raises(NotSymbolic, match="scratch offset is used in arithmetic"):
        symbolic.generalize(GRID, [_source(p, lambda *_: f"char* q = scratch + {int(b) + 64};") for p in GRID])


def test_bind_symbols_needs_each_symbol_alone_in_some_input_dim():
    s0, s1 = (symbolic.fit(GRID, [p[j] for p in GRID]) for j in (0, 1))
    prod = symbolic.fit(GRID, [b * t for b, t in GRID])
    assert symbolic.bind_symbols([[prod], [s0, s1]], 2, {0, 1}) == [(1, 0), (1, 1)]
    with pytest.raises(NotSymbolic, match=r"symbol\(s\) \[1\]"):
        symbolic.bind_symbols([[prod], [s0]], 2, {0, 1})
    assert symbolic.bind_symbols([[s0]], 2, {0}) == [(0, 0), None]  # s1 unused: nothing binds it
