"""Out-of-range gather and scatter indices raise TF's InvalidArgumentError wherever compiled code runs.

TF's GatherV2 / GatherNd / ResourceGather kernels reject an index outside the params, and its
ScatterNd / TensorScatter* kernels an index row outside the output; XLA's gather clamps and XLA's
scatter skips. Gathers and scatters lowered from TF carry TF's check (``index_check=``,
hlo/index_check.py), so: the Python runtime raises ``KernelInvalidArgument``, the TfxlaLaunch op an
``InvalidArgumentError`` (kernel status 3), and ``tfxla_plugin.function(jit_compile=True)`` (also
with the scatter inside a while loop) and a wrapped SavedModel with an embedding lookup raise where
TF eager raises, with TF's message. In-range calls still match TF, and the kernel stays usable after
a refused call. The CUDA backend refuses checked gathers and scatters (it cannot check them yet).
"""

from __future__ import annotations

import re

import keras
import numpy as np
import pytest
import tensorflow as tf

import backends.cuda as cuda
import hlo
import tfxla_plugin
from backends.cpu import CompileOptions, KernelInvalidArgument, compile as compile_module
from hlo.index_check import scatter_violation
from tfxla_plugin import _op, saved_model

CHECKED_GATHER = """HloModule checked_gather
ENTRY e {
  x = f32[3,4] parameter(0)
  i = s32[2,2] parameter(1)
  ROOT g = f32[2,2,4] gather(x, i), offset_dims={2}, collapsed_slice_dims={0}, start_index_map={0},
    index_vector_dim=2, slice_sizes={1,4}, index_check=tf_gather,
    metadata={op_type="GatherV2" op_name="model/lookup"}
}"""
X = np.arange(12, dtype=np.float32).reshape(3, 4)


def _tf_error(fn, *args) -> str:
    """TF eager's own InvalidArgumentError message for ``fn(*args)``."""
    with pytest.raises(tf.errors.InvalidArgumentError) as info:
        fn(*args)
    return info.value.message


@pytest.fixture(scope="module")
def checked(tmp_path_factory):
    return compile_module(hlo.parse_module(CHECKED_GATHER),
                          CompileOptions(cache_dir=str(tmp_path_factory.mktemp("checked"))))


def test_runtime_raises_kernel_invalid_argument(checked) -> None:
    good = np.array([[0, 1], [2, 2]], np.int32)
    np.testing.assert_array_equal(checked(X, good)[0], X[good])
    with pytest.raises(KernelInvalidArgument, match=r"^indices\[1,0\] = -2 is not in \[0, 3\)\n\t \[\[\{\{node "
                                                    r"model/lookup\}\}\]\]$"):
        checked(X, np.array([[0, 1], [-2, 2]], np.int32))
    np.testing.assert_array_equal(checked(X, good)[0], X[good])  # still usable


def test_launch_op_maps_status_3_to_invalid_argument(checked) -> None:
    op = _op.load_op_library()
    call = dict(kernel_path=str(checked.path), Tout=[tf.float32], output_shapes=[[2, 2, 4]], cluster="emb",
                kernel_hash="")
    bad = np.array([[0, 3], [1, 1]], np.int32)
    want = _tf_error(lambda: tf.gather(X, bad))
    with pytest.raises(tf.errors.InvalidArgumentError) as info:
        op.tfxla_launch(args=[X, bad], **call)
    message = info.value.message
    assert _key(message) == _key(want) == "indices[0,1] = 3 is not in [0, 3)", (message, want)
    assert "[[{{node model/lookup}}]] (TfxlaLaunch cluster 'emb', kernel 'checked_gather'" in message
    good = np.array([[2, 0], [1, 1]], np.int32)
    np.testing.assert_array_equal(op.tfxla_launch(args=[X, good], **call)[0].numpy(), X[good])


def _key(message: str) -> str:
    """The part of a TF gather error that names the index (before TF's op/node decorations)."""
    return message.split("}} ", 1)[-1].split(" [Op:")[0].split(", node name:")[0].split("\n")[0]


# (id, fn(params, indices), params, bad indices, good indices)
CASES = [
    ("gather", lambda p, i: tf.gather(p, i), X, [1, 7], [2, 0]),
    ("gather-axis1-batch", lambda p, i: tf.gather(p, i, axis=1, batch_dims=1), X, [[0], [-1], [3]],
     [[0], [1], [3]]),
    ("gather-nd", lambda p, i: tf.gather_nd(p, i), X, [[0, 1], [2, 4]], [[0, 1], [2, 3]]),
    ("embedding-lookup", lambda p, i: tf.nn.embedding_lookup(p, i), X, [[2, 3]], [[2, 1]]),
    ("gather-empty-params", lambda p, i: tf.gather(p, i), np.zeros((0, 4), np.float32), [0], None),
    ("gather-nd-empty-params", lambda p, i: tf.gather_nd(p, i), np.zeros((3, 0), np.float32), [[1]], None),
]


@pytest.mark.parametrize("fn,params,bad,good", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_function_raises_like_tf(fn, params, bad, good) -> None:
    bad = np.asarray(bad, np.int32)
    want = _tf_error(fn, tf.constant(params), tf.constant(bad))
    f = tfxla_plugin.function(fn, jit_compile=True)
    if good is not None:
        good = np.asarray(good, np.int32)
        np.testing.assert_array_equal(f(params, good).numpy(), fn(params, good).numpy())
    with pytest.raises(tf.errors.InvalidArgumentError) as info:
        f(params, bad)
    assert _key(want) in info.value.message, (want, info.value.message)


@pytest.mark.slow
def test_wrapped_saved_model_embedding_raises_like_tf(tmp_path) -> None:
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((3,), dtype="int32"), keras.layers.Embedding(5, 4),
                              keras.layers.Flatten(), keras.layers.Dense(2)])
    src, dst = tmp_path / "src", tmp_path / "dst"
    tf.saved_model.save(model, str(src))
    saved_model.wrap(src, dst, progress=False)
    original = tf.saved_model.load(str(src)).signatures["serving_default"]
    sig = tf.saved_model.load(str(dst)).signatures["serving_default"]
    (key,) = sig.structured_input_signature[1]
    good = tf.constant([[0, 4, 2]], tf.int32)
    np.testing.assert_allclose(sig(**{key: good})["output_0"].numpy(), original(**{key: good})["output_0"].numpy(),
                               rtol=1e-5, atol=1e-6)
    bad = tf.constant([[0, 5, 2]], tf.int32)
    want = _tf_error(lambda: original(**{key: bad}))
    assert "indices[0,1] = 5 is not in [0, 5)" in want
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"indices\[0,1\] = 5 is not in \[0, 5\)"):
        sig(**{key: bad})


# --- scatters ---------------------------------------------------------------------------------

CHECKED_SCATTER = """HloModule checked_scatter
%add (a: f32[], b: f32[]) -> f32[] {
  %a = f32[] parameter(0)
  %b = f32[] parameter(1)
  ROOT %s = f32[] add(%a, %b)
}
ENTRY e {
  x = f32[3,4] parameter(0)
  i = s32[3,1] parameter(1)
  u = f32[3,4] parameter(2)
  ROOT r = f32[3,4] scatter(x, i, u), update_window_dims={1}, inserted_window_dims={0},
    scatter_dims_to_operand_dims={0}, index_vector_dim=1, to_apply=%add, index_check=tf_tensor_scatter,
    metadata={op_type="TensorScatterAdd" op_name="model/scatter"}
}"""
U = np.arange(100, 112, dtype=np.float32).reshape(3, 4)


@pytest.fixture(scope="module")
def checked_scatter(tmp_path_factory):
    return compile_module(hlo.parse_module(CHECKED_SCATTER),
                          CompileOptions(cache_dir=str(tmp_path_factory.mktemp("checked_scatter"))))


@pytest.mark.parametrize("bad, where", [([[0], [3], [-1]], "indices[2] = [-1]"), ([[5], [1], [2]], "indices[0] = [5]")],
                         ids=["last-of-two-bad", "high"])
def test_scatter_runtime_and_evaluator_raise_tfs_message(bad, where, checked_scatter) -> None:
    good = np.array([[2], [0], [2]], np.int32)
    want = tf.tensor_scatter_nd_add(X, good, U).numpy()
    np.testing.assert_array_equal(checked_scatter(X, good, U)[0], want)
    bad = np.array(bad, np.int32)
    tf_key = _key(_tf_error(tf.tensor_scatter_nd_add, X, bad, U))  # TF reports the last bad row
    message = f"{where} does not index into shape [3,4]\n\t [[{{{{node model/scatter}}}}]]"
    assert message.startswith(tf_key + "\n"), (tf_key, message)
    with pytest.raises(KernelInvalidArgument, match=f"^{re.escape(message)}$"):
        checked_scatter(X, bad, U)
    with pytest.raises(hlo.HloInvalidArgumentError, match=f"^{re.escape(message)}$"):
        hlo.evaluate(hlo.parse_module(CHECKED_SCATTER), X, bad, U)
    np.testing.assert_array_equal(checked_scatter(X, good, U)[0], want)  # still usable


T4 = np.arange(4, dtype=np.float32)
# (id, fn(tensor, indices, updates), tensor, bad indices, good indices (None: no good call), updates)
SCATTER_CASES = [
    ("scatter-nd", lambda t, i, u: tf.scatter_nd(i, u, [4]), T4, [[1], [5]], [[1], [3]], [1.0, 2.0]),
    ("scatter-nd-negative", lambda t, i, u: tf.scatter_nd(i, u, [4]), T4, [[1], [-1]], [[1], [1]], [1.0, 2.0]),
    ("update-2d", lambda t, i, u: tf.tensor_scatter_nd_update(t, i, u), X, [[0, 1], [2, 4]], [[0, 1], [2, 3]],
     [1.0, 2.0]),
    ("update-negative", lambda t, i, u: tf.tensor_scatter_nd_update(t, i, u), X, [[0, 1], [-1, 2]],
     [[0, 1], [0, 1]], [1.0, 2.0]),
    ("add-slices", lambda t, i, u: tf.tensor_scatter_nd_add(t, i, u), X, [[7], [1], [9]], [[2], [1], [2]],
     np.ones((3, 4), np.float32)),
    ("min", lambda t, i, u: tf.tensor_scatter_nd_min(t, i, u), T4, [[4]], [[3]], [-1.0]),
    # an index depth of 0 with a non-empty output: TF refuses it whatever the indices hold
    ("scatter-nd-depth-0", lambda t, i, u: tf.scatter_nd(i, u, [4]), T4, np.zeros((0, 0)), None,
     np.zeros((0, 4), np.float32)),
]


@pytest.mark.parametrize("fn,tensor,bad,good,updates", [c[1:] for c in SCATTER_CASES],
                         ids=[c[0] for c in SCATTER_CASES])
def test_scatter_function_raises_like_tf(fn, tensor, bad, good, updates) -> None:
    bad, updates = np.asarray(bad, np.int32), np.asarray(updates, np.float32)
    want = _tf_error(fn, tf.constant(tensor), tf.constant(bad), tf.constant(updates))
    f = tfxla_plugin.function(fn, jit_compile=True)
    if good is not None:
        good = np.asarray(good, np.int32)
        np.testing.assert_array_equal(f(tensor, good, updates).numpy(), fn(tensor, good, updates).numpy())
    with pytest.raises(tf.errors.InvalidArgumentError) as info:
        f(tensor, bad, updates)
    assert _key(want) in info.value.message, (want, info.value.message)


def test_scatter_in_a_while_loop_raises_like_tf() -> None:
    """The status of a scatter in a while body leaves the loop: the third iteration scatters to row 4."""
    def fn(t, i):
        def body(k, t):
            return k + 1, tf.tensor_scatter_nd_add(t, i + k, [1.0])
        return tf.while_loop(lambda k, t: k < 3, body, [0, t])[1]
    f = tfxla_plugin.function(fn, jit_compile=True)
    good, bad = np.array([[0]], np.int32), np.array([[2]], np.int32)
    np.testing.assert_array_equal(f(T4, good).numpy(), fn(tf.constant(T4), tf.constant(good)).numpy())
    want = _tf_error(fn, tf.constant(T4), tf.constant(bad))
    assert _key(want) == "indices[0] = [4] does not index into shape [4]", want
    with pytest.raises(tf.errors.InvalidArgumentError) as info:
        f(T4, bad)
    assert _key(want) in info.value.message and "while/TensorScatterAdd" in info.value.message, info.value.message


@pytest.mark.parametrize("text, what", [(CHECKED_GATHER, "gather with index_check=tf_gather"),
                                        (CHECKED_SCATTER, "scatter with index_check=tf_tensor_scatter")],
                         ids=["gather", "scatter"])
def test_cuda_refuses_checked_indexing(text, what) -> None:
    """No CUDA strategy checks indices before the loop yet: refused by name, never clamped or skipped."""
    with pytest.raises(cuda.CodegenUnsupported, match=re.escape(what)):
        cuda.generate(hlo.parse_module(text))


def _zeros(*dims, dtype=tf.float32):
    return tf.zeros(dims, dtype)


ND, TENSOR = hlo.IndexCheck.TF_SCATTER_ND, hlo.IndexCheck.TF_TENSOR_SCATTER
# (id, kind, output dims, indices dims, updates dims): shapes TF's kernels refuse (or accept) whatever
# the indices hold; TF's own shape functions catch most of them when tracing, not a graph with unknown dims.
SCATTER_SHAPES = [
    ("nd-rows-into-empty", ND, (0, 3), (1, 1), (1, 3)),
    ("nd-rows-no-updates", ND, (4, 0), (1, 1), (1, 0)),
    ("nd-updates-no-rows", ND, (4,), (2, 0), (2, 4)),
    ("nd-depth-0", ND, (4,), (0, 0), (0, 4)),
    ("nd-depth-8", ND, (1,) * 8, (1, 8), (1,)),
    ("nd-rank-0", ND, (), (0, 0), (0,)),
    ("nd-empty-nothing", ND, (0,), (0, 1), (0,)),
    ("tensor-rows-into-empty", TENSOR, (0, 3), (1, 1), (1, 3)),
    ("tensor-updates-no-rows", TENSOR, (4,), (2, 0), (2, 4)),
    ("tensor-depth-0", TENSOR, (4,), (0, 0), (0, 4)),
    ("tensor-empty-nothing", TENSOR, (0,), (0, 0), (0, 0)),
]


@pytest.mark.parametrize("kind, out, idx, upd", [c[1:] for c in SCATTER_SHAPES], ids=[c[0] for c in SCATTER_SHAPES])
def test_scatter_shape_checks_say_what_tf_says(kind, out, idx, upd) -> None:
    indices, updates = _zeros(*idx, dtype=tf.int32), _zeros(*upd)
    if kind is ND:
        fn = lambda: tf.scatter_nd(indices, updates, out)  # noqa: E731
    else:
        fn = lambda: tf.tensor_scatter_nd_update(_zeros(*out), indices, updates)  # noqa: E731
    mine = scatter_violation(kind, out, np.zeros(idx, np.int32), int(np.prod(upd)), "n")
    try:
        fn()
    except tf.errors.InvalidArgumentError as e:
        assert mine == _key(e.message) + "\n\t [[{{node n}}]]", (mine, e.message)
    else:
        assert mine is None, mine
