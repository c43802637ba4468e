"""``tfxla run``: outputs equal calling the loaded signature directly (in process and in a real
subprocess) and print as ``saved_model_cli run`` prints them (also for ``--input_examples``); every user error is exit status 1 with a one-line message naming what is wrong."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

import saved_models
from tfxla_plugin import cli

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture(scope="module")
def mlp(tmp_path_factory):
    return saved_models.build("mlp", "export", cache_dir=tmp_path_factory.mktemp("models"))


@pytest.fixture(scope="module")
def two_inputs(tmp_path_factory):
    """A hand-made SavedModel whose signature takes x: float32 [None, 3] and ids: int32 [None]."""
    path = tmp_path_factory.mktemp("two_inputs") / "model"
    module = tf.Module()
    module.w = tf.Variable(np.arange(3, dtype=np.float32) + 1.0)

    @tf.function(input_signature=[tf.TensorSpec([None, 3], tf.float32, name="x"),
                                  tf.TensorSpec([None], tf.int32, name="ids")])
    def serve(x, ids):
        return {"scaled": x * module.w, "picked": tf.gather(module.w, ids) + tf.cast(ids, tf.float32)}

    tf.saved_model.save(module, str(path), signatures={"serving_default": serve, "other": serve})
    return path


def _direct(path, signature="serving_default", **feeds):
    loaded = tf.saved_model.load(str(path))
    out = loaded.signatures[signature](**{k: tf.constant(v) for k, v in feeds.items()})
    return {k: v.numpy() for k, v in out.items()}


def _run(capsys, *argv):
    code = cli.main(["run", *map(str, argv)])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def _saved_model_cli_run(path, *argv) -> str:
    """What TF's own ``saved_model_cli run`` prints (a subprocess: it parses absl flags)."""
    done = subprocess.run([sys.executable, "-m", "tensorflow.python.tools.saved_model_cli", "run", "--dir", str(path),
                           "--tag_set", "serve", "--signature_def", "serving_default", *map(str, argv)],
                          capture_output=True, text=True, timeout=120, env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"})
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


def _numbers(text: str) -> np.ndarray:
    return np.array([float(t) for t in text.replace("[", " ").replace("]", " ").split()], np.float32)


def test_input_exprs_print_each_output(mlp, tmp_path, capsys):
    code, out, err = _run(capsys, "--dir", mlp, "--input_exprs", "x=np.linspace(-1, 1, 2 * 784).reshape(2, 784)")
    assert code == 0, err
    want = _direct(mlp, x=np.linspace(-1, 1, 2 * 784).reshape(2, 784).astype(np.float32))["output_0"]
    header, _, values = out.partition("\n")
    assert header == "Result for output key output_0:"
    np.testing.assert_allclose(_numbers(values).reshape(2, 10), want, rtol=1e-6, atol=1e-7)
    # saved_model_cli prints the same header line and values for the same inputs
    np.save(tmp_path / "x.npy", np.linspace(-1, 1, 2 * 784).reshape(2, 784).astype(np.float32))
    theirs = _saved_model_cli_run(mlp, "--inputs", f"x={tmp_path / 'x.npy'}")
    their_header, _, their_values = theirs.partition("\n")
    assert their_header == header
    np.testing.assert_allclose(_numbers(values), _numbers(their_values), rtol=1e-5, atol=1e-6)


@pytest.fixture(scope="module")
def parses_examples(tmp_path_factory):
    """A SavedModel whose input is serialized tf.train.Examples with features a: float [2], b: int64 [1]."""
    path = tmp_path_factory.mktemp("examples") / "model"
    module = tf.Module()

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name="examples")])
    def serve(examples):
        f = tf.io.parse_example(examples, {"a": tf.io.FixedLenFeature([2], tf.float32),
                                           "b": tf.io.FixedLenFeature([1], tf.int64)})
        return {"s": tf.reduce_sum(f["a"], 1) + tf.cast(f["b"][:, 0], tf.float32)}

    tf.saved_model.save(module, str(path), signatures={"serving_default": serve})
    return path


def test_input_examples_like_saved_model_cli(parses_examples, capsys):
    examples = 'examples=[{"a": [1.0, 2.5], "b": [3]}, {"a": [0.5, 0.25], "b": [-1]}]'
    code, out, err = _run(capsys, "--dir", parses_examples, "--input_examples", examples)
    assert code == 0, err
    header, _, values = out.partition("\n")
    assert header == "Result for output key s:"
    np.testing.assert_array_equal(_numbers(values), [6.5, -0.25])
    assert out == _saved_model_cli_run(parses_examples, "--input_examples", examples)
    for bad, message in [('examples=[1]', "each example must be a dict of feature lists, not int"),
                         ('examples=[{"a": 1.0}]', "feature 'a' must be a non-empty list"),
                         ('examples=[{"a": [None]}]', "type NoneType is not a tf.train.Feature type"),
                         ('examples=__import__("os")', "--input_examples examples: not a Python literal"),
                         ('examples={"a": [1.0]}', "expected a list of dicts, not dict")]:
        code, out, err = _run(capsys, "--dir", parses_examples, "--input_examples", bad)
        assert (code, out) == (1, "") and err.startswith("tfxla run: ") and message in err, err


def test_inputs_from_files_saved_to_outdir(two_inputs, tmp_path, capsys):
    x = np.random.default_rng(0).standard_normal((4, 3)).astype(np.float32)
    ids = np.array([2, 0, 1, 2], np.int32)
    np.save(tmp_path / "x.npy", x)
    np.savez(tmp_path / "feeds.npz", ids=ids, other=np.zeros(3))
    outdir = tmp_path / "out"
    code, out, err = _run(capsys, "--dir", two_inputs, "--signature_def", "other", "--inputs",
                          f"x={tmp_path / 'x.npy'},ids={tmp_path / 'feeds.npz'}[ids]", "--outdir", outdir)
    assert code == 0, err
    want = _direct(two_inputs, "other", x=x, ids=ids)
    assert sorted(os.listdir(outdir)) == ["picked.npy", "scaled.npy"]
    for key, value in want.items():
        np.testing.assert_array_equal(np.load(outdir / f"{key}.npy"), value)
        assert f"Result for output key {key}:\n" in out and f"Output {key} is saved to {outdir / key}.npy\n" in out
    # existing files need --overwrite; ';' separates items as in saved_model_cli; exprs override files
    code, _, err = _run(capsys, "--dir", two_inputs, "--inputs", f"x={tmp_path / 'x.npy'}",
                        "--input_exprs", "ids=[1, 1, 1, 1];x=np.ones((4, 3))", "--outdir", outdir)
    assert code == 1 and "already exists; add --overwrite" in err
    code, _, err = _run(capsys, "--dir", two_inputs, "--inputs", f"x={tmp_path / 'x.npy'}",
                        "--input_exprs", "ids=[1, 1, 1, 1];x=np.ones((4, 3))", "--outdir", outdir, "--overwrite")
    assert code == 0, err
    want = _direct(two_inputs, x=np.ones((4, 3), np.float32), ids=np.ones(4, np.int32))
    np.testing.assert_array_equal(np.load(outdir / "picked.npy"), want["picked"])
    np.testing.assert_array_equal(np.load(outdir / "scaled.npy"), want["scaled"])


@pytest.mark.slow
def test_subprocess(tmp_path):
    path = saved_models.build("text_classifier", "saved_model", cache_dir=tmp_path)
    feeds = saved_models.example_inputs(path, 3)
    np.save(tmp_path / "tokens.npy", feeds["inputs"])
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"}
    proc = subprocess.run([sys.executable, "-m", "tfxla_plugin.cli", "run", "--dir", str(path),
                           "--inputs", f"inputs={tmp_path / 'tokens.npy'}", "--outdir", str(tmp_path / "out")],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    got = np.load(tmp_path / "out" / "output_0.npy")
    np.testing.assert_allclose(got, _direct(path, inputs=feeds["inputs"])["output_0"], rtol=1e-6, atol=1e-7)
    proc = subprocess.run([sys.executable, "-m", "tfxla_plugin.cli", "run", "--dir", str(path),
                           "--input_exprs", "inputs=np.ones((2, 32))"],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    assert "input 'inputs' of 'serving_default' expects int32, got float64" in proc.stderr


@pytest.mark.parametrize("args,message", [
    (["--input_exprs", "x=np.ones((1, 3));ids=[0]", "--signature_def", "predict"],
     "no signature 'predict'; signatures: other, serving_default"),
    (["--input_exprs", "x=np.ones((1, 3));ids=[0];idz=[1]"], "unknown input(s) 'idz' for signature 'serving_default'; "
                                                            "expected: ids, x"),
    (["--input_exprs", "x=np.ones((1, 3))"], "missing input(s) 'ids' for signature 'serving_default'"),
    ([], "no inputs given; signature 'serving_default' expects: ids, x"),
    (["--input_exprs", "x=np.ones((1, 3));ids=[0.5]"], "input 'ids' of 'serving_default' expects int32, got float64"),
    (["--input_exprs", "x=np.ones((1, 3));ids=np.array([2**40])"], "expects int32, got int64 values outside its range"),
    (["--input_exprs", "x=np.ones((1, 4));ids=[0]"],
     "input 'x' of 'serving_default' has shape (1, 4), the signature expects (-1, 3)"),
    (["--input_exprs", "x=np.ones(3);ids=[0]"], "input 'x' of 'serving_default' has shape (3,), the signature expects"),
    (["--input_exprs", "x=np.ones((1, 3));ids=np.array(['a'])"], "expects int32, got <U1"),
    (["--input_exprs", "x=__import__('os');ids=[0]"], "--input_exprs x: cannot evaluate \"__import__('os')\": NameError"),
    (["--input_exprs", "x"], "--input_exprs 'x': expected <input_key>=<expression>"),
    (["--inputs", "x=/no/such/file.npy"], "--inputs x: no such file /no/such/file.npy"),
    (["--inputs", "x:file.npy"], "--inputs 'x:file.npy': expected <input_key>=<filename>"),
    (["--input_exprs", "x=np.ones((1, 3));ids=[5]"], "running signature 'serving_default' failed:"),
    (["--tag_set", "train", "--input_exprs", "x=1"], "no MetaGraphDef with tag-set 'train'; tag-sets: serve"),
])
def test_errors(two_inputs, capsys, args, message):
    code, out, err = _run(capsys, "--dir", two_inputs, *args)
    assert code == 1 and out == ""
    assert err.startswith("tfxla run: ") and message in err and err.count("\n") == 1, err


def test_npz_needs_a_name_when_it_holds_several_arrays(two_inputs, tmp_path, capsys):
    np.savez(tmp_path / "two.npz", a=np.ones((1, 3)), b=np.zeros(1))
    np.save(tmp_path / "one.npy", np.ones((1, 3)))
    code, _, err = _run(capsys, "--dir", two_inputs, "--inputs", f"x={tmp_path / 'two.npz'}")
    assert code == 1 and "holds 2 arrays (a, b); name one" in err
    code, _, err = _run(capsys, "--dir", two_inputs, "--inputs", f"x={tmp_path / 'two.npz'}[c]")
    assert code == 1 and "has no array 'c'; arrays: a, b" in err
    code, _, err = _run(capsys, "--dir", two_inputs, "--inputs", f"x={tmp_path / 'one.npy'}[a]")
    assert code == 1 and "is a .npy file holding one array" in err


@pytest.mark.parametrize("where,message", [("missing", "no such directory"), ("empty", "not a SavedModel")])
def test_missing_or_empty_dir(tmp_path, capsys, where, message):
    path = tmp_path / where
    if where == "empty":
        path.mkdir()
    code, _, err = _run(capsys, "--dir", path, "--input_exprs", "x=1")
    assert code == 1 and f"--dir {path}: {message}" in err
