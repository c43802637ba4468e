"""``tfxla tensorboard --dir SAVEDMODEL --logdir L``: plain and wrapped SavedModels, and its errors."""

from __future__ import annotations

import json

import numpy as np
import pytest
import tensorflow as tf
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

import hlo
import tfxla_plugin
from tfxla_plugin import cli


def read_graph(path):
    acc = EventAccumulator(str(path), size_guidance={"tensors": 0})
    acc.Reload()
    return acc.Graph(), acc


@pytest.fixture(scope="module")
def plain_model(tmp_path_factory):
    """A tiny Keras MLP (None batch dimension), saved with tf.saved_model.save."""
    import keras

    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((6,)), keras.layers.Dense(5, activation="relu"), keras.layers.Dense(3),
                              keras.layers.Softmax()])
    path = tmp_path_factory.mktemp("plain") / "model"
    tf.saved_model.save(model, str(path))
    return path


@pytest.fixture(scope="module")
def wrapped_model(tmp_path_factory):
    """A SavedModel whose signature calls a TfxlaLaunch op, with a manifest (the wrapped layout)."""
    f = tfxla_plugin.function(lambda x: tf.nn.relu(x) * 2.0 + 1.0)
    module = tf.Module()
    module.serve = tf.function(lambda x: {"y": f(x)}, input_signature=[tf.TensorSpec([2, 3], tf.float32)])
    path = tmp_path_factory.mktemp("wrapped") / "model"
    tf.saved_model.save(module, str(path), signatures={"serving_default": module.serve})
    clustering = {"clusters": [{"name": "cluster_0", "nodes": 5, "size": 3, "device": "", "inputs": 1,
                                "outputs": 1, "op_types": {"Relu": 1, "Mul": 1, "AddV2": 1, "Const": 2}}],
                  "nodes_total": 7, "nodes_clustered": 5, "percent_clustered": 71.4,
                  "excluded": [{"node": "x", "op": "Placeholder", "reason": "graph inputs are cluster inputs"}],
                  "refused_merges": []}
    manifest = {"format": "tfxla-wrapped-savedmodel/1", "backend": "cpu",
                "signatures": {"serving_default": {"clustering": clustering,
                                                   "clusters": [{"name": "cluster_0", "hlo_ops": 9}]}}}
    (path / "assets").mkdir(exist_ok=True)
    (path / "assets" / "tfxla_manifest.json").write_text(json.dumps(manifest))
    return path


def test_plain_saved_model_is_compiled_at_the_given_batch(plain_model, tmp_path, capsys) -> None:
    assert cli.main(["tensorboard", "--dir", str(plain_model), "--logdir", str(tmp_path), "--batch", "3"]) == 0
    out = capsys.readouterr().out
    assert "wrote run serving_default/original" in out and "tensorboard --logdir" in out
    original, acc = read_graph(tmp_path / "serving_default" / "original")
    clustered = {n.name for n in original.node if n.attr["_XlaCluster"].s}
    assert any(n.op == "MatMul" and n.name in clustered for n in original.node)
    assert "clustering" in acc.Tags()["tensors"]
    rewritten, _ = read_graph(tmp_path / "serving_default" / "rewritten")
    assert [n.attr["cluster"].s for n in rewritten.node if n.op == "TfxlaLaunch"] == [b"cluster_0"]
    _, hlo_run = read_graph(tmp_path / "serving_default" / "hlo" / "cluster_0")
    text = hlo_run.Tensors("hlo_before_optimizations")[0].tensor_proto.string_val[0].decode()
    module = hlo.parse_module(text.split("\n", 1)[1].rsplit("```", 1)[0])
    assert module.entry.parameters[0].shape.dims[0] == 3  # the None batch dimension became --batch


def test_wrapped_saved_model_shows_its_launch_nodes(wrapped_model, tmp_path, capsys) -> None:
    assert cli.main(["tensorboard", "--dir", str(wrapped_model), "--logdir", str(tmp_path), "--name", "w"]) == 0
    assert "wrote run w/rewritten" in capsys.readouterr().out
    assert sorted(p.name for p in (tmp_path / "w").iterdir()) == ["rewritten"]
    graph, acc = read_graph(tmp_path / "w" / "rewritten")
    launches = [n for n in graph.node if n.op == "TfxlaLaunch"]
    assert len(launches) == 1  # inlined out of the signature's function call
    attrs = launches[0].attr
    assert attrs["_XlaCluster"].s == b"cluster_0" and attrs["hlo_op_count"].i == 9 and attrs["op_count"].i == 5
    assert "cluster_graph" not in attrs and max(v.ByteSize() for v in attrs.values()) < 1024
    table = acc.Tensors("clustering")[0].tensor_proto.string_val[0].decode()
    assert "5 of 7 nodes clustered (71.4%)" in table
    assert "| x | Placeholder | graph inputs are cluster inputs |" in table


def test_model_wrapped_by_tfxla_wrap(plain_model, tmp_path, capsys) -> None:
    from tfxla_plugin.saved_model import read_manifest, wrap

    wrap(plain_model, tmp_path / "wrapped", batch_tiles=(1,), progress=False)
    manifest = read_manifest(tmp_path / "wrapped")
    assert cli.main(["tensorboard", "--dir", str(tmp_path / "wrapped"), "--logdir", str(tmp_path / "logs")]) == 0
    graph, acc = read_graph(tmp_path / "logs" / "serving_default" / "rewritten")
    launches = [n for n in graph.node if n.op == "TfxlaLaunch"]
    clusters = manifest["signatures"]["serving_default"]["clusters"]
    assert sorted(n.attr["cluster"].s.decode() for n in launches) == sorted(c["name"] for c in clusters)
    for n in launches:
        assert n.attr["_XlaCluster"].s == n.attr["cluster"].s
        assert all(v.ByteSize() < 1024 for v in n.attr.values()) and "cluster_graph" not in n.attr
    assert "clustering" in acc.Tags()["tensors"]


@pytest.mark.parametrize("make_args, message", [
    (lambda m, t: ["--dir", str(t / "missing")], "does not exist"),
    (lambda m, t: ["--dir", str(t)], "is not a SavedModel (no saved_model.pb)"),
    (lambda m, t: ["--dir", str(m), "--signature_def", "nope"], "no signature 'nope'; signatures: serving_default"),
    (lambda m, t: ["--dir", str(m), "--tag_set", "train"], "cannot load SavedModel"),
    (lambda m, t: ["--dir", str(m), "--batch", "0"], "--batch must be at least 1, got 0"),
])
def test_bad_arguments_exit_1_with_a_message(plain_model, tmp_path, capsys, make_args, message) -> None:
    code = cli.main(["tensorboard", *make_args(plain_model, tmp_path), "--logdir", str(tmp_path / "logs")])
    err = capsys.readouterr().err
    assert code == 1 and message in err and err.startswith("tfxla tensorboard: ")
    assert not (tmp_path / "logs").exists()


def test_concrete_inputs_replace_none_dims(plain_model) -> None:
    from tfxla_plugin.tensorboard.saved_model import concrete_inputs, load_signature

    _, signature = load_signature(plain_model)
    inputs = concrete_inputs(signature, batch=4)
    assert [tuple(v.shape) for v in inputs.values()] == [(4, 6)]
    assert all(np.all(v.numpy() == 0) for v in inputs.values())
