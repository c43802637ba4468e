"""``tf.saved_model.save`` of tf.Modules and Keras models whose methods are ``tfxla_plugin.function``s.

Each model is saved (with and without ``signatures=``; a Keras model also with ``model.export``), its
directory moved, and loaded with ``tf.saved_model.load`` in one fresh process (``import tfxla_plugin``
registers the op): the loaded functions give the original's outputs and their graphs run ``TfxlaLaunch``,
reading the kernels from the model's ``assets/`` (stored as ``tfxla wrap`` stores them), never from the
process that saved them.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf

import tfxla_plugin

RNG = np.random.default_rng(0)
# The loaded model runs the kernels that were saved. A Keras model's saved serving function runs the
# batch-tiled kernels, the eager call of the original the kernel for its shape: the same arithmetic in
# another loop order, hence the float32 rounding tolerance.
RTOL, ATOL = 1e-5, 1e-5


class Affine(tf.Module):
    def __init__(self):
        super().__init__()
        self.w = tf.Variable(RNG.standard_normal((3, 4)).astype(np.float32))
        self.b = tf.Variable(RNG.standard_normal(4).astype(np.float32))

    @tfxla_plugin.function(input_signature=[tf.TensorSpec([None, 3], tf.float32, name="x")])
    def __call__(self, x):
        return {"y": tf.tanh(tf.matmul(x, self.w) + self.b)}


class Unsigned(tf.Module):
    """No input_signature: saved with a trace per signature it was called with, as tf.function."""

    def __init__(self):
        super().__init__()
        self.w = tf.Variable(RNG.standard_normal((3, 2)).astype(np.float32))

    @tfxla_plugin.function
    def __call__(self, x):
        return tf.nn.relu(tf.matmul(x, self.w) - 0.25)


def _keras_cnn():
    import keras

    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((8, 8, 3)), keras.layers.Conv2D(4, 3, padding="same", activation="relu"),
                              keras.layers.Flatten(), keras.layers.Dense(5)])
    reference = [w.copy() for w in model.get_weights()]
    model.call = tfxla_plugin.function(model.call, jit_compile=True)
    return model, reference


LOADER = r"""
import json, sys
from pathlib import Path
import numpy as np
import tensorflow as tf
import tfxla_plugin

root = Path(sys.argv[1])
report = {}
for name in json.loads((root / "cases.json").read_text()):
    loaded = tf.saved_model.load(str(root / name))
    x = tf.constant(np.load(root / f"{name}.x.npy"))
    entry = {"signatures": sorted(loaded.signatures.keys())}
    fns = {}
    if "serving_default" in loaded.signatures:
        sig = loaded.signatures["serving_default"]
        (key,) = sig.structured_input_signature[1]
        fns["serving_default"] = (sig, lambda sig=sig, key=key: sig(**{key: x}))
    if name.startswith("unsigned"):
        fns["call"] = (loaded.__call__.concrete_functions[0], lambda: {"output": loaded(x)})
    for fn_name, (cf, run) in fns.items():
        out = run()
        for k, v in out.items():
            np.save(root / f"{name}.{fn_name}.{k}.npy", v.numpy())
        ops = {n.op for n in cf.graph.as_graph_def().node}
        for f in cf.graph.as_graph_def().library.function:
            ops.update(n.op for n in f.node_def)
        entry[fn_name] = {"outputs": sorted(out), "ops": sorted(ops)}
    report[name] = entry
print(json.dumps(report))
"""


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """Save every case, move the directory, load them all in one fresh process; returns (report, dir, expected)."""
    here = tmp_path_factory.mktemp("saving") / "models"
    here.mkdir()
    expected: dict[str, dict[str, np.ndarray]] = {}
    x_affine = RNG.standard_normal((5, 3)).astype(np.float32)
    x_image = RNG.standard_normal((3, 8, 8, 3)).astype(np.float32)

    affine = Affine()
    tf.saved_model.save(affine, str(here / "affine"))  # no signatures=: the input_signature makes serving_default
    tf.saved_model.save(affine, str(here / "affine_sig"), signatures=affine.__call__)
    want = {"y": affine(tf.constant(x_affine))["y"].numpy()}
    expected["affine"] = expected["affine_sig"] = {"serving_default.y": want["y"]}

    unsigned = Unsigned()
    got = unsigned(tf.constant(x_affine)).numpy()  # called eagerly at [5, 3]: that trace is saved
    tf.saved_model.save(unsigned, str(here / "unsigned"))
    spec = tf.TensorSpec([None, 3], tf.float32, name="x")
    tf.saved_model.save(unsigned, str(here / "unsigned_sig"),
                        signatures={"serving_default": unsigned.__call__.get_concrete_function(spec)})
    expected["unsigned"] = {"call.output": got}
    expected["unsigned_sig"] = {"call.output": got, "serving_default.output_0": got}

    model, reference = _keras_cnn()
    out = model(tf.constant(x_image)).numpy()
    tf.saved_model.save(model, str(here / "keras"))  # Keras's own serving_default calls the compiled call
    tf.saved_model.save(model, str(here / "keras_sig"),
                        signatures=model.call.get_concrete_function(tf.TensorSpec([None, 8, 8, 3], tf.float32)))
    model.export(str(here / "keras_export"), verbose=False)  # Keras's ExportArchive: variables and resources
    expected["keras"] = expected["keras_export"] = {"serving_default.output_0": out}
    expected["keras_sig"] = {"serving_default.output_0": out}

    import keras

    plain = keras.models.clone_model(model)
    plain.set_weights(reference)
    expected["keras_tf"] = plain(tf.constant(x_image)).numpy()  # TensorFlow's own answer

    for name in ("affine", "affine_sig", "unsigned", "unsigned_sig"):
        np.save(here / f"{name}.x.npy", x_affine)
    for name in ("keras", "keras_sig", "keras_export"):
        np.save(here / f"{name}.x.npy", x_image)
    cases = [n for n in expected if n != "keras_tf"]
    (here / "cases.json").write_text(json.dumps(cases))
    moved = here.parent / "moved"
    shutil.move(str(here), str(moved))
    run = subprocess.run([sys.executable, "-c", LOADER, str(moved)], capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-4000:]
    return json.loads(run.stdout.strip().splitlines()[-1]), moved, expected


CASES = ["affine", "affine_sig", "unsigned", "unsigned_sig", "keras", "keras_sig", "keras_export"]


@pytest.mark.slow
@pytest.mark.parametrize("name", CASES)
def test_a_moved_model_loads_in_a_fresh_process_and_runs_the_saved_kernels(saved, name) -> None:
    report, moved, expected = saved
    entry = report[name]
    for key, want in expected[name].items():
        fn_name, output = key.split(".")
        assert "TfxlaLaunch" in entry[fn_name]["ops"], entry[fn_name]["ops"]
        got = np.load(moved / f"{name}.{fn_name}.{output}.npy")
        np.testing.assert_allclose(got, want, rtol=RTOL, atol=ATOL)
    assert ("serving_default" in entry["signatures"]) == (name != "unsigned")  # as tf.function: no spec, no signature


@pytest.mark.slow
@pytest.mark.parametrize("name", CASES)
def test_the_kernels_are_assets_as_wrap_stores_them(saved, name) -> None:
    _, moved, _ = saved
    assets = sorted(p.name for p in (moved / name / "assets").iterdir())
    stems = {a.split(".")[0] for a in assets}
    assert stems and all(s.startswith("k_") and len(s) == 18 for s in stems), assets
    assert assets == sorted(f"{s}{suffix}" for s in stems for suffix in (".so", ".c", ".hlo.txt"))
    # the graph names its kernels only through the Assets: no path of the saving process is in it
    assert b"tfxla_assets_" not in (moved / name / "saved_model.pb").read_bytes()


@pytest.mark.slow
def test_the_compiled_keras_model_matches_tensorflow(saved) -> None:
    _, moved, expected = saved
    got = np.load(moved / "keras.serving_default.output_0.npy")
    np.testing.assert_allclose(got, expected["keras_tf"], rtol=1e-4, atol=1e-5)
