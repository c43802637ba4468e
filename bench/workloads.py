"""The single-cluster workloads of docs/design.md §9, as TF functions with seeded inputs."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import numpy as np
import tensorflow as tf


@dataclass(frozen=True)
class Workload:
    name: str
    fn: Callable
    make_inputs: Callable[[np.random.Generator], tuple]
    rtol: float = 1e-4
    atol: float = 1e-4


def _fusion(n):
    def fn(x, w, b, mask):
        return tf.reduce_sum((x * w + b) * mask)
    return fn, lambda r: tuple(r.standard_normal(n).astype(np.float32) for _ in range(3)) + (
        (r.random(n) > 0.5).astype(np.float32),)


def _gelu(x, s, b):
    y = x * s + b
    return 0.5 * y * (1.0 + tf.tanh(math.sqrt(2 / math.pi) * (y + 0.044715 * y * y * y)))


def _layer_norm(x, g, b):
    mean, var = tf.nn.moments(x, axes=[-1], keepdims=True)
    return (x - mean) * tf.math.rsqrt(var + 1e-5) * g + b


def _mlp(x, w1, b1, w2, b2, w3, b3):
    h = tf.nn.relu(tf.matmul(x, w1) + b1)
    h = tf.nn.relu(tf.matmul(h, w2) + b2)
    return tf.matmul(h, w3) + b3


def _mlp_inputs(batch):
    def make(r):
        def w(*s):
            return (r.standard_normal(s) / math.sqrt(s[0])).astype(np.float32)
        return (r.standard_normal((batch, 784)).astype(np.float32), w(784, 512), w(512)[:512] * 0,
                w(512, 512), np.zeros(512, np.float32), w(512, 10), np.zeros(10, np.float32))
    return make


WORKLOADS = [
    Workload("call overhead (x+1, scalar)", lambda x: x + 1.0, lambda r: (np.float32(1.5),)),
    Workload("reduce_sum((x*w+b)*mask) 1e6", *_fusion(10**6), rtol=1e-3, atol=1e-2),
    Workload("reduce_sum((x*w+b)*mask) 1e7", *_fusion(10**7), rtol=1e-3, atol=1e-1),
    Workload("gelu(x*s+b) [4096,1024]", _gelu, lambda r: (r.standard_normal((4096, 1024)).astype(np.float32),
                                                        np.float32(1.1), np.float32(0.1))),
    Workload("softmax [1024,1024]", lambda x: tf.nn.softmax(x), lambda r: (r.standard_normal((1024, 1024)).astype(np.float32),)),
    Workload("layer norm [512,1024]", _layer_norm, lambda r: (r.standard_normal((512, 1024)).astype(np.float32),
                                                             r.standard_normal(1024).astype(np.float32),
                                                             r.standard_normal(1024).astype(np.float32))),
    Workload("MLP 784-512-512-10 batch 64", _mlp, _mlp_inputs(64)),
    Workload("MLP 784-512-512-10 batch 1", _mlp, _mlp_inputs(1)),
]
