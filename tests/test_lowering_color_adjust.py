"""AdjustContrastv2, AdjustHue, AdjustSaturation (``tf.image.adjust_*``) against TF's CPU kernels:
hue and saturation bit for bit on random pixels and the edge cases of their branches (grey pixels,
ties between channels, hues wrapping past 0 and 6, saturation clamped at 0 and 1); contrast within
float rounding (the kernel's mean sums in Eigen's order). Errors with TF's message."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

import tfxla_plugin
from tests.lowering_harness import check_lowering

RNG = np.random.default_rng(5)
EDGES = np.array([[0.5, 0.5, 0.5], [0.0, 0.0, 0.0], [1.0, 0.2, 0.2], [0.2, 1.0, 0.2], [0.2, 0.2, 1.0],
                  [0.7, 0.7, 0.1], [0.1, 0.7, 0.7], [0.7, 0.1, 0.7], [0.9, 0.3, 0.6], [0.3, 0.6, 0.9],
                  [-0.2, 0.4, 1.3], [1.0, 0.0, 1e-7]], np.float32)


def _images() -> np.ndarray:
    x = RNG.uniform(-0.1, 1.1, size=(2, 4, 5, 3)).astype(np.float32)
    x[0, 0, :, :] = EDGES[:5]
    x[1, 1, :, :] = EDGES[5:10]
    x[1, 2, :2, :] = EDGES[10:]
    return x


DELTAS = [0.0, 0.13, -0.4, 1.0, -1.0, 0.999]
SCALES = [0.0, 0.5, 1.0, 1.7, 40.0]


@pytest.mark.parametrize("delta", DELTAS)
def test_adjust_hue_lowering_is_tfs_kernel(delta: float) -> None:
    check_lowering(lambda x, d: tf.raw_ops.AdjustHue(images=x, delta=d), _images(), np.float32(delta))


def test_adjust_hue_and_saturation_compiled_are_tfs_kernels() -> None:
    """One compiled function (one build), every delta and scale: bit for bit."""
    fn = lambda a, d, s: (tf.image.adjust_hue(a, d), tf.raw_ops.AdjustSaturation(images=a, scale=s))  # noqa: E731
    compiled = tfxla_plugin.function(fn, jit_compile=True)
    x = _images()
    for d, s in zip(DELTAS, SCALES + [2.5]):
        args = (x, np.float32(d), np.float32(s))
        for got, want in zip(compiled(*args), fn(*args)):
            np.testing.assert_array_equal(got.numpy(), want.numpy(), err_msg=f"delta {d}, scale {s}")


@pytest.mark.parametrize("dims", [(2, 4, 5, 3), (4, 5, 2), (1, 1, 1, 1), (2, 3, 0, 2)])
def test_adjust_contrast(dims) -> None:
    x = RNG.normal(size=dims).astype(np.float32)
    check_lowering(lambda a, f: tf.raw_ops.AdjustContrastv2(images=a, contrast_factor=f), x, np.float32(1.7),
                   rtol=1e-6, atol=1e-6)


def test_errors_name_what_is_wrong() -> None:
    two = np.zeros((2, 2, 2), np.float32)
    message = "input must have 3 channels but instead has 2 channels"
    with pytest.raises(tf.errors.InvalidArgumentError, match=message):
        tf.raw_ops.AdjustHue(images=two, delta=0.1)
    with pytest.raises(tf.errors.InvalidArgumentError, match=message):
        tfxla_plugin.function(lambda a: tf.raw_ops.AdjustSaturation(images=a, scale=0.5), jit_compile=True)(two)
    # (an image of rank < 3 fails TF's shape inference while tracing: it never reaches the lowering)
