"""The stateless random family against TF eager's CPU kernels, bit for bit (Philox): key/counter
derivation, uniform floats of every width, integers in a range and over the full range, normals and
truncated normals (glibc's f32 logf/sincosf replayed, hlo/lowering/ops/_glibc_f32.py),
odd sizes and several seeds; the errors TF raises; and a Keras Dropout layer in training mode compiled
with ``tfxla_plugin.function(jit_compile=True)`` equal to TF eager call after call."""

from __future__ import annotations

import keras
import numpy as np
import pytest
import tensorflow as tf
from google.protobuf import text_format

import hlo
import tfxla_plugin
from hlo.lowering import LoweringError
from tests.lowering_harness import lower_fn

R = tf.raw_ops
SEEDS = [np.array(s, np.int32) for s in ([7, -3], [0, 0], [-1, 2**31 - 1])] + [np.array([2**40 + 5, -9], np.int64)]
SHAPES = [(1,), (7,), (3, 5), (2, 1, 3)]
ULP_INT = {np.dtype(np.float32): np.int32, np.dtype(np.float64): np.int64}


def evaluated(fn, *args) -> list[np.ndarray]:
    got = hlo.evaluate(lower_fn(fn, *args), *args)
    want = [np.asarray(t) for t in tf.nest.flatten(fn(*[tf.constant(a) for a in args]))]
    assert [(g.shape, g.dtype) for g in got] == [(w.shape, w.dtype) for w in want]
    return list(zip(got, want))


def same_bits(g: np.ndarray, w: np.ndarray) -> bool:
    return np.array_equal(np.ascontiguousarray(g).view(np.uint8), np.ascontiguousarray(w).view(np.uint8))


def ulps(g: np.ndarray, w: np.ndarray) -> np.ndarray:
    it = ULP_INT[g.dtype]
    return np.abs(g.view(it).astype(np.int64) - w.view(it).astype(np.int64))


@pytest.mark.parametrize("seed", SEEDS, ids=lambda s: f"{s.dtype.name}{s.tolist()}")
def test_key_counter_and_alg_equal_tf(seed) -> None:
    for g, w in evaluated(lambda s: [*R.StatelessRandomGetKeyCounterAlg(seed=s), R.StatelessRandomGetAlg()], seed):
        assert same_bits(g, w), (g, w)


UNIFORM = [tf.float32, tf.float64, tf.float16, tf.bfloat16]


@pytest.mark.parametrize("seed", SEEDS, ids=lambda s: f"{s.dtype.name}{s.tolist()}")
def test_uniform_floats_and_integers_are_bit_exact(seed) -> None:
    def fn(s):
        out = [tf.random.stateless_uniform(shape, s, dtype=dt) for dt in UNIFORM for shape in SHAPES]
        out += [tf.random.stateless_uniform((9,), s, -5, 17, dtype=tf.int32),
                tf.random.stateless_uniform((3, 3), s, -(2**40), 2**41 + 3, dtype=tf.int64),
                tf.random.stateless_uniform((5,), s, -2**31, 2**31 - 1, dtype=tf.int32)]  # the widest range
        out += [tf.random.stateless_uniform((7,), s, None, None, dtype=dt)
                for dt in (tf.int32, tf.int64, tf.uint32, tf.uint64)]
        out += [R.StatelessRandomUniform(shape=[5], seed=s, dtype=tf.float32),  # the V1 ops
                R.StatelessRandomUniformInt(shape=[5], seed=s, minval=np.int64(3), maxval=np.int64(99)),
                R.StatelessRandomUniformFullInt(shape=[3], seed=s, dtype=tf.uint64)]
        return out
    for i, (g, w) in enumerate(evaluated(fn, seed)):
        assert same_bits(g, w), f"output {i} ({g.dtype}{g.shape}): {g.ravel()[:6]} != TF {w.ravel()[:6]}"


def test_uniform_int_with_run_time_bounds_is_bit_exact() -> None:
    fn = lambda s, lo, hi: tf.random.stateless_uniform((11,), s, lo, hi, dtype=tf.int64)  # noqa: E731
    for g, w in evaluated(fn, SEEDS[0], np.int64(-1000), np.int64(5)):
        assert same_bits(g, w)


@pytest.mark.parametrize("dtype", [tf.float32, tf.float64, tf.float16, tf.bfloat16], ids=lambda t: t.name)
def test_normal_and_truncated_normal_are_bit_exact(dtype) -> None:
    """Same Philox words, Box-Muller pairs (glibc's logf/sincosf replayed for f32, f16, bf16) and
    rejections as TF. f64 uses the log/sin/cos opcodes: exact on the CPU backend (glibc, see the
    compiled test below); the evaluator's NumPy log/sin/cos are not always correctly rounded, so there
    f64 values may be an ulp or two off."""
    def fn(s):
        return [tf.random.stateless_normal((1001,), s, dtype=dtype), tf.random.stateless_normal((2, 3), s, dtype=dtype),
                tf.random.stateless_truncated_normal((513,), s, dtype=dtype),
                R.StatelessRandomNormal(shape=[9], seed=s, dtype=dtype),
                R.StatelessTruncatedNormal(shape=[9], seed=s, dtype=dtype)]
    for seed in SEEDS[:2]:
        for i, (g, w) in enumerate(evaluated(fn, seed)):
            if g.dtype == np.float64:
                assert ulps(g, w).max() <= 2, f"output {i}: {ulps(g, w).max()} ulp"
            else:
                assert same_bits(g, w), f"output {i}: {int(np.sum(g != w))} of {g.size} differ"
            if i in (2, 4):
                assert np.abs(g.astype(np.float64)).max() <= 2.0  # < 2 before rounding to f16/bf16


_LIBM_HELPER = """
#define _GNU_SOURCE
#include <math.h>
void vlogf(const float* x, float* y, long n) { for (long i = 0; i < n; i++) y[i] = logf(x[i]); }
void vsincosf(const float* x, float* s, float* c, long n) { for (long i = 0; i < n; i++) sincosf(x[i], s + i, c + i); }
"""


def test_glibc_logf_and_sincosf_replayed_bit_for_bit(tmp_path) -> None:
    """The f32 Box-Muller helpers against this machine's C library on every 61st of the 2^23 inputs
    Box-Muller can give them (u1 in [1e-7, 1), v = float(2 pi u)); checked on all 2^23 when written."""
    import ctypes
    import shutil
    import subprocess

    from hlo.builder import ComputationBuilder, module_of
    from hlo.dtypes import PrimitiveType as P
    from hlo.lowering.ops import _glibc_f32 as glibc
    from hlo.lowering.ops._philox import Ops
    from hlo.shapes import Shape

    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.skip("needs a C compiler to call the C library's logf/sincosf")
    (tmp_path / "libm_helper.c").write_text(_LIBM_HELPER)
    subprocess.run([cc, "-O2", "-shared", "-fPIC", "-o", str(tmp_path / "h.so"), str(tmp_path / "libm_helper.c"),
                    "-lm"], check=True)
    lib = ctypes.CDLL(str(tmp_path / "h.so"))
    arr = np.ctypeslib.ndpointer(np.float32)
    lib.vlogf.argtypes = [arr, arr, ctypes.c_long]
    lib.vsincosf.argtypes = [arr, arr, arr, ctypes.c_long]

    mantissas = np.arange(0, 1 << 23, 61, dtype=np.uint32)
    u = (mantissas | np.uint32(127 << 23)).view(np.float32) - np.float32(1.0)
    u1, v = np.maximum(u, np.float32(1e-7)), (2 * np.pi * u.astype(np.float64)).astype(np.float32)
    cb = ComputationBuilder("glibc")
    ops = Ops(cb)
    x, y = (cb.parameter(Shape.array(P.F32, u.shape)) for _ in range(2))
    got = hlo.evaluate(module_of("glibc", cb.build(cb.tuple(glibc.logf(ops, x), *glibc.sincosf(ops, y))), cb), u1, v)
    want = [np.empty_like(u) for _ in range(3)]
    lib.vlogf(u1, want[0], u.size)
    lib.vsincosf(v, want[1], want[2], u.size)
    for name, g, w in zip(("logf", "sinf", "cosf"), got, want):
        assert same_bits(g, w), f"{name}: {int(np.sum(g != w))} of {g.size} differ"


def test_empty_shape_and_errors_name_the_node() -> None:
    (g, w), = evaluated(lambda s: tf.random.stateless_uniform((0, 3), s), SEEDS[0])
    assert g.shape == w.shape == (0, 3)
    key, counter = (np.asarray(t) for t in R.StatelessRandomGetKeyCounter(seed=SEEDS[0]))
    threefry = lambda k, c: R.StatelessRandomUniformV2(shape=[3], key=k, counter=c, alg=2)  # noqa: E731
    with pytest.raises(LoweringError, match=r"StatelessRandomUniformV2.*Unsupported algorithm id: 2"):
        lower_fn(threefry, key, counter)
    empty = lambda s: tf.random.stateless_uniform((3,), s, 5, 5, dtype=tf.int32)  # noqa: E731
    with pytest.raises(LoweringError, match=r"Need minval < maxval, got 5 >= 5"):
        lower_fn(empty, SEEDS[0])


def test_keras_dropout_compiled_equals_tf_eager_call_after_call() -> None:
    """Keras 3's Dropout reads its SeedGenerator's variable, derives a seed, and draws with
    StatelessRandomGetKeyCounter + StatelessRandomUniformV2; compiled, the mask must be TF's exactly."""
    x = tf.constant(np.random.default_rng(0).normal(size=(8, 37)).astype(np.float32))
    eager, compiled = keras.layers.Dropout(0.4, seed=3), keras.layers.Dropout(0.4, seed=3)
    f = tfxla_plugin.function(lambda t: compiled(t, training=True), jit_compile=True)
    for _ in range(3):
        want = eager(x, training=True).numpy()
        got = f(x).numpy()
        assert same_bits(got, want)
        assert 0.25 < (got == 0).mean() < 0.55
    assert np.array_equal(eager.seed_generator.state.numpy(), compiled.seed_generator.state.numpy())
    gd = text_format.Parse(f.experimental_get_compiler_ir(x)(stage="graph"), tf.compat.v1.GraphDef())
    ops = {n.op for n in gd.node}
    assert "TfxlaLaunch" in ops and not ops & {"StatelessRandomUniformV2", "StatelessRandomGetKeyCounter"}


def test_compiled_normals_equal_tf_exactly() -> None:
    """On the CPU backend too (f64 log/sin/cos are glibc's there, as in TF's kernel)."""
    seed = tf.constant([11, 4], tf.int64)
    fn = lambda s: [tf.random.stateless_normal((301,), s, dtype=dt) for dt in (tf.float64, tf.float32)] + [  # noqa: E731
        tf.random.stateless_truncated_normal((301,), s, dtype=dt) for dt in (tf.float64, tf.bfloat16)]
    for g, w in zip(tfxla_plugin.function(fn, jit_compile=True)(seed), fn(seed)):
        assert same_bits(g.numpy(), w.numpy())


def test_cnn_train_step_with_dropout_compiled_tracks_tf() -> None:
    """Three SGD steps of a small CNN with Dropout: the compiled step draws TF's masks (a different
    mask would move the weights by ~0.1), so the weights stay within float rounding of TF's."""
    def make():
        keras.utils.set_random_seed(0)
        model = keras.Sequential([keras.Input((6, 6, 2)), keras.layers.Conv2D(4, 3, activation="relu"),
                                  keras.layers.Flatten(), keras.layers.Dropout(0.5, seed=1), keras.layers.Dense(3)])
        return model, keras.optimizers.SGD(0.1)

    def step_of(model, opt):
        loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True)

        def step(x, y):
            with tf.GradientTape() as tape:
                loss = loss_fn(y, model(x, training=True))
            opt.apply_gradients(zip(tape.gradient(loss, model.trainable_variables), model.trainable_variables))
            return loss
        return step

    x = tf.constant(np.random.default_rng(0).normal(size=(8, 6, 6, 2)).astype(np.float32))
    y = tf.constant(np.arange(8) % 3)
    (m_tf, o_tf), (m_ours, o_ours) = make(), make()
    step_tf, step_ours = tf.function(step_of(m_tf, o_tf)), tfxla_plugin.function(step_of(m_ours, o_ours),
                                                                                 jit_compile=True)
    for _ in range(3):
        np.testing.assert_allclose(float(step_ours(x, y)), float(step_tf(x, y)), rtol=1e-6)
        for a, b in zip(m_ours.weights, m_tf.weights):
            np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-6, atol=1e-6, err_msg=a.path)


def test_keras_random_layers_compiled_equal_tf_eager() -> None:
    """The Keras layers that draw stateless random numbers in training mode, in one compiled function,
    twice (their seed generators advance alike). GaussianDropout and RandomBrightness compile exactly
    too (checked when written); RandomContrast also reduces a mean, whose summation order differs by
    an ulp, and RandomTranslation/Rotation/Zoom need ImageProjectiveTransformV3 (not lowered)."""
    makers = [lambda: keras.layers.GaussianNoise(0.3, seed=1), lambda: keras.layers.AlphaDropout(0.3, seed=3),
              lambda: keras.layers.SpatialDropout2D(0.3, seed=4), lambda: keras.layers.RandomFlip(seed=5)]
    eager, compiled = [m() for m in makers], [m() for m in makers]
    x = tf.constant(np.random.default_rng(0).normal(size=(4, 6, 6, 3)).astype(np.float32))
    f = tfxla_plugin.function(lambda t: [layer(t, training=True) for layer in compiled], jit_compile=True)
    for _ in range(2):
        for layer, got in zip(eager, f(x)):
            assert same_bits(got.numpy(), layer(x, training=True).numpy()), type(layer).__name__
