"""``tfxla_plugin.saved_model.wrap`` / ``tfxla wrap``: wrapped SavedModels load anywhere and match the original.

Small Keras models are saved both ways (``tf.saved_model.save`` and ``model.export``), wrapped,
moved, and loaded again (in this process and in a fresh one); outputs are compared against the
original model for batch sizes 1, 3 and 8 from one set of kernels. A stored kernel that is changed,
deleted or built for CPU features this machine lacks is rebuilt by the op from its C source with the
recorded command (no shell, no interpreter, nothing left behind); tampering with both is refused, and
a compiler that is not there is a clear error naming the node and the command.
"""

from __future__ import annotations

import json
import logging
import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import keras
import numpy as np
import pytest
import tensorflow as tf

import backends
import tfxla_plugin  # noqa: F401  (registers the TfxlaLaunch op)
from tfxla_plugin import saved_model
from tfxla_plugin.cli import main as cli_main
from tfxla_plugin.cluster_compiler import sha256_file

BATCHES = (1, 3, 8)
TOL = dict(rtol=1e-5, atol=1e-6)


def _mlp() -> keras.Model:
    keras.utils.set_random_seed(0)
    return keras.Sequential([keras.Input((12,)), keras.layers.Dense(16, activation="relu"),
                             keras.layers.Dense(4, activation="softmax")])


def _inputs(n: int) -> np.ndarray:
    return np.random.default_rng(n).standard_normal((n, 12)).astype(np.float32)


@pytest.fixture(scope="module")
def wrapped(tmp_path_factory) -> dict:
    """The MLP saved both ways and wrapped once each: style -> (model, src, dst, report)."""
    root = tmp_path_factory.mktemp("wrap")
    model = _mlp()
    out = {}
    for style in ("saved_model", "export"):
        src, dst = root / f"{style}_src", root / f"{style}_dst"
        if style == "saved_model":
            tf.saved_model.save(model, str(src))
        else:
            model.export(str(src), verbose=False)
        out[style] = (model, src, dst, saved_model.wrap(src, dst, progress=False))
    return out


def _signature(path: Path, name: str = "serving_default"):
    return tf.saved_model.load(str(path)).signatures[name]


def _call(sig, x: np.ndarray) -> dict[str, np.ndarray]:
    (key,) = sig.structured_input_signature[1]
    return {k: v.numpy() for k, v in sig(**{key: tf.constant(x)}).items()}


@pytest.mark.parametrize("style", ["saved_model", "export"])
def test_wrapped_model_keeps_the_signature_and_matches(wrapped, style, tmp_path) -> None:
    model, src, dst, report = wrapped[style]
    original, moved = _signature(src), tmp_path / "moved"
    shutil.copytree(dst, moved)
    sig = _signature(moved)
    assert sig.structured_input_signature == original.structured_input_signature
    assert set(sig.structured_outputs) == set(original.structured_outputs)
    (key,) = sig.structured_input_signature[1]
    assert sig.structured_input_signature[1][key].shape.as_list() == [None, 12]
    ops = {n.op for n in sig.graph.as_graph_def().node} | {
        n.op for f in sig.graph.as_graph_def().library.function for n in f.node_def}
    assert "TfxlaLaunch" in ops and "MatMul" not in ops
    assert "ReadVariableOp" not in ops  # the launch reads the variables itself (graph_passes/launch_reads.py)
    for n in BATCHES:
        got, want = _call(sig, _inputs(n)), _call(original, _inputs(n))
        for k in want:
            np.testing.assert_allclose(got[k], want[k], **TOL, err_msg=f"{style} batch {n}")
        np.testing.assert_allclose(list(got.values())[0], model(_inputs(n)).numpy(), **TOL)
    assert report.signatures[0].batch_tiles == (1, 8)


def test_manifest_records_every_kernel_and_its_hashes(wrapped) -> None:
    _, src, dst, report = wrapped["saved_model"]
    manifest = saved_model.read_manifest(dst)
    assert manifest["format"] == saved_model.FORMAT and manifest["backend"] == "cpu"
    assert saved_model.read_manifest(src) is None
    sig = manifest["signatures"]["serving_default"]
    assert sig["inputs"] == {"inputs": {"dtype": "float32", "shape": [None, 12]}}
    assert sig["batch_tiles"] == [1, 8] and sig["clustering"]["nodes_clustered"] > 0
    assert len(manifest["kernels"]) == 2  # one cluster, two tiles
    for kid, k in manifest["kernels"].items():
        assert sha256_file(dst / "assets" / k["so"]) == k["so_sha256"]
        assert sha256_file(dst / "assets" / k["c"]) == k["c_sha256"]
        assert k["rebuild_argv"] == backends.get("cpu").rebuild_command((dst / "assets" / k["c"]).read_text())
        assert k["rebuild_argv"].count("{source}") == k["rebuild_argv"].count("{output}") == 1
        assert (dst / "assets" / k["hlo"]).read_text().startswith("HloModule")
        assert k["batch_tile"] in (1, 8) and kid in sig["clusters"][0]["kernels"]
    assert "avx2" in manifest["cpu_features"] or not manifest["cpu_features"]


def test_fresh_process_loads_a_moved_model(wrapped, tmp_path) -> None:
    _, src, dst, _ = wrapped["export"]
    moved = tmp_path / "elsewhere" / "model"
    shutil.copytree(dst, moved)
    for n in BATCHES:
        np.save(tmp_path / f"x{n}.npy", _inputs(n))
    script = textwrap.dedent(f"""
        import numpy as np, tensorflow as tf, tfxla_plugin
        sig = tf.saved_model.load({str(moved)!r}).signatures["serving_default"]
        (key,) = sig.structured_input_signature[1]
        for n in {BATCHES!r}:
            out = sig(**{{key: tf.constant(np.load({str(tmp_path)!r} + f"/x{{n}}.npy"))}})
            np.save({str(tmp_path)!r} + f"/y{{n}}.npy", list(out.values())[0].numpy())
    """)
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    original = _signature(src)
    for n in BATCHES:
        want = list(_call(original, _inputs(n)).values())[0]
        np.testing.assert_allclose(np.load(tmp_path / f"y{n}.npy"), want, **TOL)


def _flip_byte(path: Path, offset: int = 0) -> None:
    data = bytearray(path.read_bytes())
    data[len(data) // 2 + offset] ^= 0xFF
    path.write_bytes(bytes(data))


def test_tampered_kernel_is_rebuilt_from_its_source(wrapped, tmp_path, capfd) -> None:
    _, src, dst, _ = wrapped["saved_model"]
    copy = tmp_path / "tampered"
    shutil.copytree(dst, copy)
    manifest = saved_model.read_manifest(copy)
    for k in manifest["kernels"].values():
        _flip_byte(copy / "assets" / k["so"])
    sig = _signature(copy)
    for n in BATCHES:
        np.testing.assert_allclose(list(_call(sig, _inputs(n)).values())[0],
                                   list(_call(_signature(src), _inputs(n)).values())[0], **TOL)
    err = capfd.readouterr().err
    assert "rebuilt it from its source" in err and "not the recorded" in err


def test_tampered_kernel_and_source_are_refused(wrapped, tmp_path) -> None:
    _, _, dst, _ = wrapped["saved_model"]
    copy = tmp_path / "both"
    shutil.copytree(dst, copy)
    manifest = saved_model.read_manifest(copy)
    for k in manifest["kernels"].values():
        _flip_byte(copy / "assets" / k["so"])
        c = copy / "assets" / k["c"]
        c.write_text(c.read_text() + "\n/* changed */\n")
    sig = _signature(copy)
    with pytest.raises(tf.errors.DataLossError, match=r"its source '.*\.c' has sha256 .* refusing to load or rebuild"):
        _call(sig, _inputs(3))


def test_a_deleted_kernel_is_rebuilt_and_nothing_is_left_behind(wrapped, tmp_path, monkeypatch, capfd) -> None:
    _, src, dst, _ = wrapped["export"]
    copy, temp, cache = tmp_path / "deleted", tmp_path / "tmp", tmp_path / "cache"
    shutil.copytree(dst, copy)
    temp.mkdir()
    monkeypatch.setenv("TMPDIR", str(temp))  # where the op makes its private build directories
    monkeypatch.setenv("TFXLA_CACHE_DIR", str(cache))
    for k in saved_model.read_manifest(copy)["kernels"].values():
        (copy / "assets" / k["so"]).unlink()
    sig = _signature(copy)
    for n in BATCHES:
        np.testing.assert_allclose(list(_call(sig, _inputs(n)).values())[0],
                                   list(_call(_signature(src), _inputs(n)).values())[0], **TOL)
    assert "tfxla kernel file '" in capfd.readouterr().err  # ... not found; rebuilt
    assert not list(temp.iterdir()) and not cache.exists()


def test_a_missing_compiler_is_a_clear_error_naming_the_node_and_command(tmp_path, monkeypatch) -> None:
    tf.saved_model.save(_mlp(), str(tmp_path / "src"))
    missing = ["/nonexistent/tfxla-test-cc", "-O2", "{source}", "-o", "{output}"]
    monkeypatch.setattr(backends.get("cpu"), "rebuild_command", lambda source: missing)
    saved_model.wrap(tmp_path / "src", tmp_path / "dst", progress=False)
    for k in saved_model.read_manifest(tmp_path / "dst")["kernels"].values():
        _flip_byte(tmp_path / "dst" / "assets" / k["so"])
    with pytest.raises(tf.errors.FailedPreconditionError) as e:
        _call(_signature(tmp_path / "dst"), _inputs(1))
    assert re.search(r"TfxlaLaunch node '[^']+' \(cluster '[^']+'\): tfxla kernel '.*\.so' has sha256 ",
                     e.value.message), e.value.message
    assert "cannot run '/nonexistent/tfxla-test-cc': No such file or directory (command: /nonexistent/tfxla-test-cc" \
        " -O2 " in e.value.message


def test_missing_cpu_features_rebuild(tmp_path, monkeypatch, capfd) -> None:
    model = _mlp()
    tf.saved_model.save(model, str(tmp_path / "src"))
    import backends.cpu.target

    # what the CPU backend says its kernels were built for (Backend.target_features, read per wrap)
    monkeypatch.setattr(backends.cpu.target, "target_features", lambda: ("avx2", "tfxla_test_missing_isa"))
    saved_model.wrap(tmp_path / "src", tmp_path / "dst", progress=False)
    sig = _signature(tmp_path / "dst")
    np.testing.assert_allclose(list(_call(sig, _inputs(3)).values())[0], model(_inputs(3)).numpy(), **TOL)
    assert "lacks (tfxla_test_missing_isa)" in capfd.readouterr().err


def test_freeze_folds_weights_and_still_matches(tmp_path) -> None:
    model = _mlp()
    tf.saved_model.save(model, str(tmp_path / "src"))
    saved_model.wrap(tmp_path / "src", tmp_path / "dst", freeze=True, progress=False)
    assert saved_model.read_manifest(tmp_path / "dst")["frozen"] is True
    sig = _signature(tmp_path / "dst")
    assert not sig.graph.variables
    for n in BATCHES:
        np.testing.assert_allclose(list(_call(sig, _inputs(n)).values())[0], model(_inputs(n)).numpy(), **TOL)


class _BatchNormalized(tf.Module):
    @tf.function(input_signature=[tf.TensorSpec([None, 4], tf.float32, name="x")])
    def serve(self, x):
        centered = x - tf.reduce_mean(x, axis=0)  # depends on the whole batch: cannot be tiled
        return {"y": tf.tanh(centered * 2.0 + 1.0) * 3.0 - 1.0}


def test_row_dependent_signature_stays_in_tensorflow_under_auto(tmp_path) -> None:
    module = _BatchNormalized()
    tf.saved_model.save(module, str(tmp_path / "src"), signatures={"serving_default": module.serve})
    report = saved_model.wrap(tmp_path / "src", tmp_path / "dst", progress=False)
    assert report.signatures[0].notes, "the row-dependent cluster should be noted"
    assert "reduces over the batch dimension" in " ".join(report.signatures[0].notes.values())
    sig = _signature(tmp_path / "dst")
    for n in BATCHES:
        x = np.random.default_rng(n).standard_normal((n, 4)).astype(np.float32)
        np.testing.assert_allclose(sig(x=tf.constant(x))["y"].numpy(), module.serve(tf.constant(x))["y"].numpy(),
                                   rtol=1e-5, atol=1e-5)
    with pytest.raises(ValueError, match="cannot compile for every batch size"):
        saved_model.wrap(tmp_path / "src", tmp_path / "dst2", jit_compile=True, progress=False)


def _text_classifier() -> keras.Model:
    tokens = keras.Input(shape=(None,), dtype="int32")  # exported as [None, None]: any batch, any length
    x = keras.layers.Embedding(40, 8)(tokens)
    x = keras.layers.GlobalAveragePooling1D()(x)
    return keras.Model(tokens, keras.layers.Dense(3, activation="softmax")(x))


def test_a_variable_length_text_classifier_wraps_with_symbolic_dims(tmp_path) -> None:
    keras.utils.set_random_seed(3)
    model = _text_classifier()
    model.export(str(tmp_path / "src"), verbose=False)
    report = saved_model.wrap(tmp_path / "src", tmp_path / "dst", progress=False)
    assert report.signatures[0].clusters == 1 and not report.compiled_nothing
    moved = tmp_path / "elsewhere" / "model"
    shutil.copytree(tmp_path / "dst", moved)
    shapes = [(1, 1), (2, 7), (5, 30), (3, 64)]
    for b, t in shapes:
        np.save(tmp_path / f"x{b}_{t}.npy", np.random.default_rng(t).integers(0, 40, size=(b, t)).astype(np.int32))
    script = textwrap.dedent(f"""
        import numpy as np, tensorflow as tf, tfxla_plugin
        sig = tf.saved_model.load({str(moved)!r}).signatures["serve"]
        (key,) = sig.structured_input_signature[1]
        for b, t in {shapes!r}:
            out = sig(**{{key: tf.constant(np.load({str(tmp_path)!r} + f"/x{{b}}_{{t}}.npy"))}})
            np.save({str(tmp_path)!r} + f"/y{{b}}_{{t}}.npy", list(out.values())[0].numpy())
    """)
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    for b, t in shapes:
        want = model(np.load(tmp_path / f"x{b}_{t}.npy")).numpy()
        np.testing.assert_allclose(np.load(tmp_path / f"y{b}_{t}.npy"), want, **TOL)


class _AnyRank(tf.Module):
    @tf.function(input_signature=[tf.TensorSpec(None, tf.float32, name="z")])
    def serve(self, z):
        return {"y": tf.tanh(z) * 2.0 + tf.exp(-z * z)}


def test_a_signature_of_unknown_rank_wraps_to_no_cluster_and_says_why(tmp_path, caplog, capsys) -> None:
    module = _AnyRank()
    tf.saved_model.save(module, str(tmp_path / "src"), signatures={"serving_default": module.serve})
    with caplog.at_level(logging.WARNING, logger="tfxla_plugin"):
        report = saved_model.wrap(tmp_path / "src", tmp_path / "dst", progress=False)
    assert report.signatures[0].name == "serving_default" and report.compiled_nothing
    why = "input(s) z (unknown rank) have unknown dims that no kernel serves: batch tiles need a None leading dim"
    assert report.signatures[0].no_cluster_reason.startswith(why)
    assert "tfxla wrap: no symbolic dims for" in caplog.text and "input z has an unknown rank" in caplog.text
    assert f"tfxla wrap: signature 'serving_default' compiled no cluster (it runs in TensorFlow, uncompiled): {why}" \
        in caplog.text
    assert f"    no cluster compiled: {why}" in str(report)
    # the CLI writes the model but exits 2: wrapping gained nothing
    assert cli_main(["wrap", "--dir", str(tmp_path / "src"), "--output_dir", str(tmp_path / "cli"), "--quiet"]) == 2
    assert "tfxla wrap: no signature compiled any cluster;" in capsys.readouterr().err
    assert (tmp_path / "cli" / "saved_model.pb").is_file()
    sig = _signature(tmp_path / "dst")
    for shape in ((2, 3), (5, 7)):
        z = np.random.default_rng(shape[1]).standard_normal(shape).astype(np.float32)
        np.testing.assert_allclose(sig(z=tf.constant(z))["y"].numpy(), module.serve(tf.constant(z))["y"].numpy(),
                                   rtol=1e-5, atol=1e-6)


def test_cli_wrap_and_its_errors(tmp_path, capsys) -> None:
    tf.saved_model.save(_mlp(), str(tmp_path / "src"))
    assert cli_main(["wrap", "--dir", str(tmp_path / "src"), "--output_dir", str(tmp_path / "out"), "--quiet",
                     "--batch_tiles", "2,4"]) == 0
    assert "batch tiles [2, 4]" in capsys.readouterr().out
    assert json.loads((tmp_path / "out" / "assets" / saved_model.MANIFEST).read_text())["signatures"]
    assert cli_main(["wrap", "--dir", str(tmp_path / "nope"), "--output_dir", str(tmp_path / "o2"), "--quiet"]) == 1
    assert "is not a SavedModel directory" in capsys.readouterr().err
    assert cli_main(["wrap", "--dir", str(tmp_path / "src"), "--output_dir", str(tmp_path / "out"), "--quiet"]) == 1
    assert "exists and is not empty" in capsys.readouterr().err
    assert cli_main(["wrap", "--dir", str(tmp_path / "src"), "--output_dir", str(tmp_path / "o3"), "--quiet",
                     "--signature_def", "nope"]) == 1
    assert "unknown signature(s) ['nope']" in capsys.readouterr().err


def test_a_wrapped_model_is_served_over_the_rest_api(wrapped) -> None:
    from starlette.testclient import TestClient

    from tfxla_plugin.serving import make_app

    model, _, dst, _ = wrapped["saved_model"]
    with TestClient(make_app(dst, "mlp")) as client:
        assert client.get("/v1/models/mlp").status_code == 200
        x = _inputs(3)
        r = client.post("/v1/models/mlp:predict", json={"instances": x.tolist()})
        assert r.status_code == 200, r.text
        np.testing.assert_allclose(np.asarray(r.json()["predictions"]), model(x).numpy(), rtol=1e-5, atol=1e-6)
        stats = client.get("/v1/models/mlp/stats").json()
        assert stats.get("wrapped") is True, stats
