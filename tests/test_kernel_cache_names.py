"""Kernel sources name no cluster or TF node, so the kernel cache hits across structurally identical clusters.

Keras names layers from per-process counters (``dense``, then ``dense_1``...), and those names reach the
HLO as parameter names; the cluster's name (``cluster_N``) is positional. Neither may reach the kernel's
source, which is its cache key (``tfxla_plugin/cluster_compiler.py`` ``KERNEL_MODULE_NAME``): the same
model built twice in one process compiles the second time with no C compiler run. The dumps keep the names.
"""

from __future__ import annotations

import numpy as np
import tensorflow as tf

import tfxla_plugin
from backends import kernel_cache
from tfxla_plugin.cluster_compiler import KERNEL_MODULE_NAME


def _model():
    import keras

    inputs = keras.Input((12, 12, 3))
    h = keras.layers.Conv2D(8, 3, activation="relu")(inputs)
    h = keras.layers.BatchNormalization()(h)
    h = keras.layers.GlobalAveragePooling2D()(h)
    return keras.Model(inputs, keras.layers.Dense(4)(h))


def test_the_same_model_built_twice_compiles_once(tmp_path, monkeypatch):
    monkeypatch.setenv("TFXLA_FLAGS", f"--cache_dir={tmp_path / 'cache'} --dump_to={tmp_path / 'dump'}")
    x = tf.constant(np.random.default_rng(0).standard_normal((2, 12, 12, 3)).astype(np.float32))
    runs, names, sources = [], [], []
    for _ in range(2):
        model = _model()  # the second gets other layer (and so variable and HLO parameter) names
        fn = tfxla_plugin.function(lambda x, m=model: m(x, training=False), jit_compile=True)
        before = kernel_cache.builds()
        compiled = fn.compiled_graph(x)
        runs.append(kernel_cache.builds() - before)
        names.append([p.name for c in compiled.clusters for p in c.optimized.entry.parameters])
        sources.append([c.c_source for c in compiled.clusters])
        np.testing.assert_allclose(fn(x).numpy(), model(x, training=False).numpy(), rtol=1e-5, atol=1e-5)
    assert names[0] != names[1]  # the models' names differ ...
    assert runs[0] >= 1 and runs[1] == 0  # ... and the second compiled nothing
    assert sources[0] == sources[1]
    (source,) = sources[1]
    layer_names = [n for n in names[1] if "ReadVariableOp" in n]  # the weights' parameters, named by Keras
    assert len(layer_names) >= 4 and not [n for n in layer_names if n in source]
    assert "cluster_0" not in source and f'\\"module\\": \\"{KERNEL_MODULE_NAME}\\"' in source
    # the dumped source's header (not compiled) still maps the kernel's inputs to the HLO parameters
    dumped = sorted((tmp_path / "dump").glob("module_*.cluster_0.c"))
    assert len(dumped) == 2
    header = dumped[1].read_text().split("*/", 1)[0]
    assert header.startswith(f"/* tfxla cluster cluster_0: HLO module cluster_0, generated as module "
                             f"{KERNEL_MODULE_NAME}")
    assert f"input 1: %{names[1][1]} " in header

