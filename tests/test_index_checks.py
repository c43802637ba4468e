"""Out-of-range gather indices raise TF's InvalidArgumentError wherever a compiled gather runs.

TF's GatherV2 / GatherNd / ResourceGather kernels reject an index outside the params; XLA's gather
clamps it. Gathers lowered from TF carry TF's check (``index_check=``, hlo/index_check.py), so:
the Python runtime raises ``KernelInvalidArgument``, the TfxlaLaunch op an ``InvalidArgumentError``
(kernel status 3), and ``tfxla_plugin.function(jit_compile=True)`` and a wrapped SavedModel with an
embedding lookup raise where TF eager raises, with TF's message. In-range calls still match TF, and
the kernel stays usable after a refused call.
"""

from __future__ import annotations

import keras
import numpy as np
import pytest
import tensorflow as tf

import hlo
import tfxla_plugin
from backends.cpu import CompileOptions, KernelInvalidArgument, compile as compile_module
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
