"""The sample SavedModels (saved_models/): every model in both export styles builds, loads with a
None batch dimension and matches the in-memory Keras model; builds are deterministic and cached."""

from __future__ import annotations

import json

import numpy as np
import pytest
import tensorflow as tf

import saved_models
from tfxla_plugin import cli

CASES = [
    pytest.param("mlp", {}, id="mlp"),
    pytest.param("small_cnn", {}, id="small_cnn"),
    pytest.param("small_cnn", {"input_shape": (28, 28, 1)}, id="small_cnn_28x28x1"),
    pytest.param("text_classifier", {}, id="text_classifier"),
    pytest.param("mobilenet_v2", {"input_shape": (96, 96, 3)}, id="mobilenet_v2_96", marks=pytest.mark.slow),
]
INPUT_NAMES = {"mlp": "x", "small_cnn": "image", "mobilenet_v2": "image", "text_classifier": "tokens"}


@pytest.fixture(scope="module")
def cache(sample_models_cache):
    """The run's sample models (tests/conftest.py): test_saved_model_samples.py builds these too. The
    build itself (deterministic, cached, rebuilt on a changed recipe) is tested on fresh directories."""
    return sample_models_cache


def _variables(path) -> dict[str, np.ndarray]:
    """The serving signature's variables by name (model.export may list them in another order per build)."""
    loaded = tf.saved_model.load(str(path))  # keeps the variables alive while they are read
    variables = loaded.signatures["serving_default"].variables
    values = {v.name: v.numpy() for v in variables}
    assert len(values) == len(variables), "variable names are not unique"
    return values


@pytest.mark.parametrize("style", saved_models.STYLES)
@pytest.mark.parametrize("name,options", CASES)
def test_model_builds_loads_and_matches_keras(cache, name, options, style):
    path = saved_models.build(name, style, cache_dir=cache, **options)
    loaded = tf.saved_model.load(str(path))
    fn = loaded.signatures["serving_default"]
    args, kwargs = fn.structured_input_signature
    assert args == () and len(kwargs) == 1
    (key, spec), = kwargs.items()
    assert key == ("inputs" if style == "saved_model" else INPUT_NAMES[name])
    assert spec.shape[0] is None and spec.shape.rank >= 2, spec
    assert all(d is not None for d in spec.shape[1:])
    model = saved_models.make_model(name, **options)
    for batch in (1, 3):
        feeds = saved_models.example_inputs(path, batch, seed=batch)
        assert list(feeds) == [key]
        x = feeds[key]
        assert x.dtype == spec.dtype.as_numpy_dtype and x.shape == (batch, *spec.shape[1:])
        got = fn(**{key: tf.constant(x)})
        assert list(got) == ["output_0"]
        want = np.asarray(model(x, training=False))
        np.testing.assert_allclose(got["output_0"].numpy(), want, rtol=1e-5, atol=1e-5)
        assert want.shape[0] == batch


def test_export_style_keeps_the_input_name(cache):
    path = saved_models.build("text_classifier", "export", cache_dir=cache)
    spec = tf.saved_model.load(str(path)).signatures["serving_default"].structured_input_signature[1]
    assert list(spec) == ["tokens"] and spec["tokens"].dtype == tf.int32


def test_token_ids_stay_within_the_vocabulary(tmp_path):
    path = saved_models.build("text_classifier", "saved_model", cache_dir=tmp_path, vocab_size=7, seq_len=5)
    ids = saved_models.example_inputs(path, 64)["inputs"]
    assert ids.dtype == np.int32 and ids.shape == (64, 5)
    assert ids.min() >= 0 and ids.max() <= 6 and len(np.unique(ids)) == 7


def test_builds_are_deterministic(tmp_path):
    for name in ("mlp", "text_classifier"):
        first = _variables(saved_models.build(name, "export", cache_dir=tmp_path / "a"))
        second = _variables(saved_models.build(name, "export", cache_dir=tmp_path / "b"))
        assert first.keys() == second.keys() and len(first) >= 6
        for k in first:
            np.testing.assert_array_equal(first[k], second[k], err_msg=f"{name}: {k}")
    other = _variables(saved_models.build("mlp", "export", cache_dir=tmp_path / "c", seed=1))
    same = _variables(saved_models.build("mlp", "export", cache_dir=tmp_path / "a"))
    assert any(not np.array_equal(other[k], same[k]) for k in same)


def test_cache_reuses_and_rebuilds_on_a_changed_recipe(tmp_path):
    path = saved_models.build("mlp", cache_dir=tmp_path)
    assert path == saved_models.model_dir("mlp", cache_dir=tmp_path) == tmp_path / "mlp" / "saved_model"
    pb = path / "saved_model.pb"
    mtime = pb.stat().st_mtime_ns
    assert saved_models.build("mlp", cache_dir=tmp_path) == path and pb.stat().st_mtime_ns == mtime
    stamp = json.loads((path / saved_models.STAMP).read_text())
    assert stamp["model"] == "mlp" and stamp["style"] == "saved_model" and stamp["tf_version"] == tf.__version__
    stamp["recipe_sha256"] = "0" * 64  # as if recipes.py had changed since this build
    (path / saved_models.STAMP).write_text(json.dumps(stamp))
    saved_models.build("mlp", cache_dir=tmp_path)
    assert pb.stat().st_mtime_ns != mtime
    assert json.loads((path / saved_models.STAMP).read_text())["recipe_sha256"] != "0" * 64
    mtime = pb.stat().st_mtime_ns
    saved_models.build("mlp", cache_dir=tmp_path, rebuild=True)
    assert pb.stat().st_mtime_ns != mtime
    assert saved_models.build("small_cnn", cache_dir=tmp_path, input_shape="28x28x1") == \
        tmp_path / "small_cnn-input_shape=28x28x1" / "saved_model"


@pytest.mark.parametrize("call,message", [
    (lambda d: saved_models.build("resnet", cache_dir=d), "unknown sample model 'resnet'; models: mlp, small_cnn"),
    (lambda d: saved_models.build("mlp", "onnx", cache_dir=d), "unknown style 'onnx'; styles: saved_model, export"),
    (lambda d: saved_models.build("mlp", cache_dir=d, input_shape=(2, 2)), "mlp: unknown option(s) input_shape"),
    (lambda d: saved_models.build("small_cnn", cache_dir=d, input_shape="28by28"),
     "small_cnn: option input_shape: expected a shape like 96x96x3"),
    (lambda d: saved_models.build("text_classifier", cache_dir=d, embed_dim=10, num_heads=4),
     "embed_dim 10 is not a multiple of num_heads 4"),
    (lambda d: saved_models.example_inputs(saved_models.build("mlp", cache_dir=d), 2, signature="nope"),
     "no signature 'nope'; signatures: serving_default"),
])
def test_bad_requests_are_clear_errors(tmp_path, call, message):
    with pytest.raises(ValueError) as e:
        call(tmp_path)
    assert message in str(e.value)


def test_command_line_builds_and_lists(tmp_path, capsys):
    from saved_models.__main__ import main

    assert main(["--out", str(tmp_path), "mlp", "--style", "export"]) == 0
    assert capsys.readouterr().out.split() == [str(tmp_path / "mlp" / "export")]
    assert cli.main(["models", "build", "--out", str(tmp_path), "small_cnn", "--option", "input_shape=28x28x1"]) == 0
    out = capsys.readouterr().out.split()
    assert out == [str(tmp_path / "small_cnn-input_shape=28x28x1" / s) for s in saved_models.STYLES]
    assert all((tmp_path / "small_cnn-input_shape=28x28x1" / s / "saved_model.pb").is_file() for s in saved_models.STYLES)
    assert cli.main(["models", "build", "--out", str(tmp_path), "mlp", "--option", "vocab_size=3"]) == 1
    assert "option(s) vocab_size apply to none of mlp" in capsys.readouterr().err
    assert cli.main(["models", "build", "--out", str(tmp_path), "lenet"]) == 1
    assert "unknown model 'lenet'" in capsys.readouterr().err
    assert cli.main(["models", "list"]) == 0
    listing = capsys.readouterr().out
    assert all(f"\n{name}: " in listing for name in saved_models.MODELS)
