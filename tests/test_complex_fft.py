"""complex64/complex128 and FFTs end to end: HLO text, shape rules, the evaluator against NumPy, the CPU
backend's fft kernel against the evaluator, and the TF lowerings compiled with
``tfxla_plugin.function(jit_compile=True)`` against TF eager (whose FFTs are ducc's).

Tolerances: an FFT output's error is measured relative to the largest output magnitude and bounded by
``eps * log2(n)`` with eps 1e-6 for complex64 (f32) and 1e-14 for complex128: a Cooley-Tukey FFT's error
grows with log2(n) (ours measures ~1.2e-7 at n = 256 in f32). Elementwise complex results use the f32/f64
tolerances of the other lowering tests, relative to each element's magnitude.
"""

from __future__ import annotations

import math
import os

import numpy as np
import pytest

import hlo
from backends.cpu.fft_c import uses_bluestein, work_elements
from hlo.shape_inference import ShapeError
from tests.cpu_backend_util import check_module, compile_text, kernel_cache  # noqa: F401  (a fixture)

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

RNG = np.random.default_rng(0)
EPS = {np.dtype(np.complex64): 1e-6, np.dtype(np.float32): 1e-6,
       np.dtype(np.complex128): 1e-14, np.dtype(np.float64): 1e-14}


def fft_error(got: np.ndarray, want: np.ndarray) -> float:
    scale = float(np.abs(want).max()) or 1.0
    return float(np.abs(got.astype(np.complex128) - want.astype(np.complex128)).max()) / scale


def assert_fft_close(got, want, n: int, what: str = "") -> None:
    assert got.shape == want.shape and got.dtype == want.dtype, (what, got.shape, want.shape, got.dtype, want.dtype)
    bound = EPS[np.dtype(want.dtype)] * max(1.0, math.log2(max(n, 2)))
    err = fft_error(got, want)
    assert err <= bound, f"{what}: relative error {err:.2e} > {bound:.2e} (n={n})"


def crandn(shape, dtype=np.complex64) -> np.ndarray:
    return (RNG.standard_normal(shape) + 1j * RNG.standard_normal(shape)).astype(dtype)


# --- HLO: text, shapes, evaluator ------------------------------------------------------------------

TEXT = """HloModule spectra, entry_computation_layout={(f32[4,8]{1,0}, c128[2,3,5]{2,1,0})->(c64[4,5]{1,0}, f64[2,3,8]{2,1,0}, c64[4,5]{1,0})}

ENTRY %spectra (x: f32[4,8], z: c128[2,3,5]) -> (c64[4,5], f64[2,3,8], c64[4,5]) {
  %x = f32[4,8]{1,0} parameter(0)
  %r = c64[4,5]{1,0} fft(f32[4,8]{1,0} %x), fft_type=RFFT, fft_length={8}
  %z = c128[2,3,5]{2,1,0} parameter(1)
  %i = f64[2,3,8]{2,1,0} fft(c128[2,3,5]{2,1,0} %z), fft_type=IRFFT, fft_length={3,8}
  %k = c64[] constant((1.5, -inf))
  %b = c64[4,5]{1,0} broadcast(c64[] %k), dimensions={}
  %m = c64[4,5]{1,0} multiply(c64[4,5]{1,0} %r, c64[4,5]{1,0} %b)
  ROOT %t = (c64[4,5]{1,0}, f64[2,3,8]{2,1,0}, c64[4,5]{1,0}) tuple(c64[4,5]{1,0} %r, f64[2,3,8]{2,1,0} %i, c64[4,5]{1,0} %m)
}
"""


def test_complex_and_fft_text_round_trips() -> None:
    module = hlo.parse_module(TEXT)
    hlo.verify(module)
    text = str(module)
    assert "fft_type=IRFFT, fft_length={3,8}" in text and "constant((1.5, -inf))" in text
    assert hlo.parse_module(text) == module
    assert str(hlo.parse_module(text)) == text


@pytest.mark.parametrize("line, message", [
    ("c64[4,8] fft(%x), fft_type=FFT, fft_length={8}", r"FFT takes c64 or c128, got f32\[4,8\]"),
    ("c64[4,8] fft(%x), fft_type=RFFT, fft_length={8}", r"inferred c64\[4,5\] from operands, declared c64\[4,8\]"),
    ("c64[4,5] fft(%x), fft_type=RFFT, fft_length={6}", r"needs the last dims of the operand to be \[6\]"),
    ("c64[4,5] fft(%x), fft_type=RFFT, fft_length={1,2,3,4}", "fft_length must have 1 to 3 sizes"),
    ("c64[4,5] fft(%x), fft_type=DCT, fft_length={8}", "an fft type"),
])
def test_fft_shape_rule_states_xla_conditions(line: str, message: str) -> None:
    text = f"HloModule m\nENTRY e {{\n  %x = f32[4,8] parameter(0)\n  ROOT %r = {line}\n}}\n"
    with pytest.raises((ShapeError, hlo.HloParseError, hlo.HloVerifierError), match=message):
        hlo.verify(hlo.parse_module(text))


def test_evaluator_matches_numpy() -> None:
    x = RNG.standard_normal((4, 8)).astype(np.float32)
    z = crandn((2, 3, 5), np.complex128)
    r, i, m = hlo.evaluate(hlo.parse_module(TEXT), x, z)
    np.testing.assert_allclose(r, np.fft.rfft(x.astype(np.float64)), rtol=1e-6, atol=1e-6)
    assert r.dtype == np.complex64 and i.dtype == np.float64
    np.testing.assert_allclose(i, np.fft.irfftn(z, s=(3, 8), axes=(1, 2)), rtol=1e-13, atol=1e-14)
    assert np.isneginf(m.imag[r.real > 0]).all()  # (a + bi)(1.5 - inf i): the textbook product's imag part


# --- the CPU backend's kernel ----------------------------------------------------------------------

# (dims, fft_length): lengths powers of two, odd, prime (direct radix and Bluestein), batched, 1-3 dims.
SIZES = [((3, 7), (7,)), ((2, 12), (12,)), ((3, 97), (97,)), ((2, 256), (256,)), ((1, 1), (1,)),
         ((4, 6, 10), (6, 10)), ((2, 3, 5, 8), (3, 5, 8)), ((5, 37), (37,))]


def _fft_module(ctype: str, rtype: str) -> str:
    params, lines, results = [], [], []
    for k, (dims, lengths) in enumerate(SIZES):
        half = dims[:-1] + (dims[-1] // 2 + 1,)
        d, h, n = (",".join(map(str, s)) for s in (dims, half, lengths))
        params += [f"%c{k} = {ctype}[{d}] parameter({3 * k})", f"%r{k} = {rtype}[{d}] parameter({3 * k + 1})",
                   f"%h{k} = {ctype}[{h}] parameter({3 * k + 2})"]
        lines += [f"%f{k} = {ctype}[{d}] fft(%c{k}), fft_type=FFT, fft_length={{{n}}}",
                  f"%i{k} = {ctype}[{d}] fft(%c{k}), fft_type=IFFT, fft_length={{{n}}}",
                  f"%rf{k} = {ctype}[{h}] fft(%r{k}), fft_type=RFFT, fft_length={{{n}}}",
                  f"%ir{k} = {rtype}[{d}] fft(%h{k}), fft_type=IRFFT, fft_length={{{n}}}"]
        results += [(f"f{k}", f"{ctype}[{d}]"), (f"i{k}", f"{ctype}[{d}]"), (f"rf{k}", f"{ctype}[{h}]"),
                    (f"ir{k}", f"{rtype}[{d}]")]
    body = "\n".join("  " + x for x in params + lines)
    sig = ", ".join(s for _, s in results)
    return (f"HloModule ffts_{ctype}\nENTRY %e {{\n{body}\n  ROOT %t = ({sig}) tuple("
            + ", ".join("%" + r for r, _ in results) + ")\n}\n")


@pytest.mark.parametrize("ctype, rtype", [("c64", "f32"), ("c128", "f64")])
def test_cpu_fft_kernel_matches_the_evaluator(ctype: str, rtype: str, kernel_cache) -> None:
    exe = compile_text(_fft_module(ctype, rtype), kernel_cache)
    cdt, rdt = np.dtype(hlo.PrimitiveType.from_text(ctype).numpy), np.dtype(hlo.PrimitiveType.from_text(rtype).numpy)
    args = []
    for dims, _ in SIZES:
        args += [crandn(dims, cdt), RNG.standard_normal(dims).astype(rdt), crandn(dims[:-1] + (dims[-1] // 2 + 1,), cdt)]
    got, want = exe(*args), hlo.evaluate(exe.module, *args)
    for k, (dims, lengths) in enumerate(SIZES):
        for j, kind in enumerate(("FFT", "IFFT", "RFFT", "IRFFT")):
            assert_fft_close(got[4 * k + j], want[4 * k + j], math.prod(lengths), f"{ctype} {kind} {dims}")


COMPLEX_STRUCTURE = """HloModule complex_structure
%addc (a: c64[], b: c64[]) -> c64[] {
  %a = c64[] parameter(0)
  %b = c64[] parameter(1)
  ROOT %s = c64[] add(%a, %b)
}
ENTRY %e (x: c64[4,6], y: c64[6,3]) -> (c64[4,3], c64[4], c64[6,7], c64[12,4]) {
  %x = c64[4,6] parameter(0)
  %y = c64[6,3] parameter(1)
  %d = c64[4,3] dot(%x, %y), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  %z = c64[] constant((0, 0))
  %r = c64[4] reduce(%x, %z), dimensions={1}, to_apply=%addc
  %t = c64[6,4] transpose(%x), dimensions={1,0}
  %k = c64[] constant((1, -1))
  %p = c64[6,7] pad(%t, %k), padding=0_0x1_2
  %c = c64[12,4] concatenate(%t, %t), dimensions={0}
  ROOT %o = (c64[4,3], c64[4], c64[6,7], c64[12,4]) tuple(%d, %r, %p, %c)
}
"""


def test_cpu_complex_dot_reduce_and_data_movement(kernel_cache) -> None:
    check_module(compile_text(COMPLEX_STRUCTURE, kernel_cache))  # f32 tolerances, per element


def test_cpu_complex_abs_keeps_hypots_special_values(kernel_cache) -> None:
    exe = compile_text("HloModule a\nENTRY e {\n  x = c64[7] parameter(0)\n  ROOT f = f32[7] abs(x)\n}\n", kernel_cache)
    x = np.array([complex(np.inf, np.nan), complex(np.nan, -np.inf), complex(np.nan, 1), 3 - 4j, 1e30 + 1e30j,
                  -0.0, 1e-30 - 1e-30j], np.complex64)
    got = exe(x)[0]
    np.testing.assert_array_equal(got, hlo.evaluate(exe.module, x)[0])  # inf, inf, nan, 5, ... (no overflow)
    assert np.isinf(got[:2]).all() and got[3] == 5


def test_bluestein_is_used_for_large_prime_factors() -> None:
    assert [n for n in (7, 12, 31, 37, 97, 256, 194) if uses_bluestein(n)] == [37, 97, 194]
    assert work_elements(256) == 256 and work_elements(97) == 2 * 256


SPECTRUM = """HloModule spectrum_{b}
ENTRY %e (x: f32[{b},4,16]) -> (f32[{b},4,16]) {{
  %x = f32[{b},4,16] parameter(0)
  %r = c64[{b},4,9] fft(%x), fft_type=RFFT, fft_length={{16}}
  %m = c64[{b},4,9] multiply(%r, %r)
  %i = f32[{b},4,16] fft(%m), fft_type=IRFFT, fft_length={{4,16}}
  ROOT %o = (f32[{b},4,16]) tuple(%i)
}}
"""


def test_fft_tiles_over_a_batch_it_does_not_transform() -> None:
    from hlo.analysis import NotBatchPolymorphic, batch_polymorphism

    at = {b: hlo.parse_module(SPECTRUM.format(b=b)) for b in (1, 2, 3, 5)}
    assert batch_polymorphism(at[2], at[3], 2, 3, [True]).outputs == (True,)
    x = RNG.standard_normal((5, 4, 16)).astype(np.float32)
    whole = hlo.evaluate(at[5], x)[0]
    for r in range(5):  # row by row equals the whole batch: what tiling relies on
        np.testing.assert_allclose(hlo.evaluate(at[1], x[r:r + 1])[0], whole[r:r + 1], rtol=1e-6, atol=1e-6)
    over = SPECTRUM.replace("fft_length={{4,16}}", "fft_length={{{b},4,16}}")
    with pytest.raises(NotBatchPolymorphic, match=r"%i \(fft\): attribute fft_length depends on the batch size"):
        batch_polymorphism(hlo.parse_module(over.format(b=2)), hlo.parse_module(over.format(b=3)), 2, 3, [True])


# --- TF lowerings ---------------------------------------------------------------------------------

tf = pytest.importorskip("tensorflow")
tfxla_plugin = pytest.importorskip("tfxla_plugin")


def _compiled(fn, *args):
    got = tfxla_plugin.function(fn, jit_compile=True)(*args)
    want = fn(*[tf.constant(a) for a in args])
    return [np.asarray(g) for g in tf.nest.flatten(got)], [np.asarray(w) for w in tf.nest.flatten(want)]


@pytest.mark.parametrize("dtype", [np.complex64, np.complex128])
def test_complex_ops_compiled_match_tf(dtype) -> None:
    real = np.float32 if dtype is np.complex64 else np.float64
    x, y = crandn((3, 5), dtype), crandn((3, 5), dtype)
    a, b = RNG.standard_normal((3, 5)).astype(real), RNG.standard_normal((5,)).astype(real)

    def ops(x, y, a, b):
        z = tf.complex(a, b)  # broadcast
        return (z, tf.math.real(x), tf.math.imag(x), tf.abs(x), tf.math.conj(x), tf.math.angle(x),
                x + y, x - y, x * y, x / y, -x, tf.exp(x), tf.math.log(x), tf.sqrt(x), tf.square(x),
                tf.math.rsqrt(x), tf.math.reciprocal(x), tf.sin(x), tf.cos(x), tf.tan(x), tf.tanh(x), tf.sign(x),
                tf.sign(x * 0), tf.reduce_sum(x, 1), tf.reduce_prod(x, 0), tf.reduce_mean(x),
                tf.equal(x, y), tf.not_equal(x, x), tf.cast(a, dtype),
                tf.cast(x, real), tf.reshape(tf.transpose(x), [15]), tf.concat([x, y], 0))
    got, want = _compiled(ops, x, y, a, b)
    rtol = 2e-5 if dtype is np.complex64 else 1e-12
    for k, (g, w) in enumerate(zip(got, want)):
        assert g.dtype == w.dtype and g.shape == w.shape, k
        if w.dtype.kind in "fc":
            np.testing.assert_allclose(g, w, rtol=rtol, atol=rtol, err_msg=f"output {k}")
        else:
            np.testing.assert_array_equal(g, w, err_msg=f"output {k}")


def test_fft_families_compiled_match_tf() -> None:
    c = crandn((2, 6, 10, 12))
    c128 = crandn((3, 97), np.complex128)
    r = RNG.standard_normal((2, 6, 10, 16)).astype(np.float32)

    def ffts(c, c128, r):
        return (tf.signal.fft(c), tf.signal.ifft(c), tf.signal.fft2d(c), tf.signal.ifft2d(c), tf.signal.fft3d(c),
                tf.signal.ifft3d(c), tf.signal.fft(c128), tf.signal.ifft(c128),
                tf.signal.rfft(r), tf.signal.rfft(r, [12]), tf.signal.rfft(r, [20]),  # as is, cropped, padded
                tf.signal.rfft2d(r), tf.signal.rfft3d(r, [4, 7, 16]),
                tf.signal.irfft(c), tf.signal.irfft(c, [9]), tf.signal.irfft2d(c, [6, 30]),
                tf.signal.irfft3d(c, [2, 10, 22]))
    got, want = _compiled(ffts, c, c128, r)
    for k, (g, w) in enumerate(zip(got, want)):
        assert_fft_close(g, w, 4096, f"output {k}")  # n: the largest transform's size bounds them all


def test_stft_of_a_batch_of_signals_and_its_inverse() -> None:
    signals = RNG.standard_normal((8, 4000)).astype(np.float32)

    def spectrogram(x):
        s = tf.signal.stft(x, frame_length=400, frame_step=160, fft_length=512)
        return tf.abs(s), tf.math.log(tf.abs(s) + 1e-6)

    (mag, logmag), (want_mag, want_log) = _compiled(spectrogram, signals)
    assert mag.shape == (8, 23, 257)
    assert_fft_close(mag, want_mag, 512, "|stft|")
    np.testing.assert_allclose(logmag, want_log, atol=1e-3)

    def round_trip(x):
        s = tf.signal.stft(x, frame_length=256, frame_step=64)
        return tf.signal.inverse_stft(s, frame_length=256, frame_step=64,
                                      window_fn=tf.signal.inverse_stft_window_fn(64))

    (back,), (want_back,) = _compiled(round_trip, signals)
    assert_fft_close(back, want_back, 256, "inverse_stft")
    inner = slice(256, back.shape[1] - 256)  # away from the edges the window sum is constant
    np.testing.assert_allclose(back[:, inner], signals[:, inner], atol=1e-5)
