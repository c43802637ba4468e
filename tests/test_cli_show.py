"""``tfxla show``: signatures as TensorFlow reports them, the wrapped-model section from a hand-made
manifest (tfxla-wrapped-savedmodel/1 layout), and ``--clusters`` on plain and wrapped models. A malformed
manifest (bad JSON, wrong types, file names with ``..`` or absolute, links out of the model) is one
line on stderr and exit 1, never a traceback, and names no file outside the model directory."""

from __future__ import annotations

import ast
import hashlib
import json
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

import saved_models
from graph_passes import pipeline
from tfxla_plugin import cli


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    cache = tmp_path_factory.mktemp("models")
    return {style: saved_models.build("mlp", style, cache_dir=cache) for style in saved_models.STYLES}


def _show(capsys, *argv):
    code = cli.main(["show", *map(str, argv)])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def _tf_shape(spec) -> list:
    return [None if d is None else int(d) for d in spec.shape]


@pytest.mark.parametrize("style", saved_models.STYLES)
def test_json_matches_the_loaded_signatures(models, capsys, style):
    code, out, err = _show(capsys, "--dir", models[style], "--format", "json")
    assert code == 0, err
    doc = json.loads(out)
    loaded = tf.saved_model.load(str(models[style]))
    assert set(doc["signatures"]) == set(loaded.signatures)
    for name, fn in loaded.signatures.items():
        shown = doc["signatures"][name]
        inputs = fn.structured_input_signature[1]
        assert {k: (v["dtype"], v["shape"]) for k, v in shown["inputs"].items()} == \
            {k: (s.dtype.name, _tf_shape(s)) for k, s in inputs.items()}
        assert {k: (v["dtype"], v["shape"]) for k, v in shown["outputs"].items()} == \
            {k: (s.dtype.name, _tf_shape(s)) for k, s in fn.structured_outputs.items()}
    assert doc["wrapped"] is None and doc["tag_sets"] == [["serve"]]


def _saved_model_cli(*argv) -> list[str]:
    """What TF's own ``saved_model_cli show`` prints (run as a subprocess: it parses absl flags)."""
    done = subprocess.run([sys.executable, "-m", "tensorflow.python.tools.saved_model_cli", "show", *map(str, argv)],
                          capture_output=True, text=True, timeout=120, env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"})
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout.splitlines()


def _ops_as_sets(lines: list[str]) -> list:
    """The ``--list_ops`` line prints a Python set (in any order): compare it as a set."""
    marker = " contains the following ops: "
    return [(line.split(marker)[0], ast.literal_eval(line.split(marker)[1])) if marker in line else line
            for line in lines]


@pytest.mark.parametrize("args", [(), ("--tag_set", "serve"), ("--tag_set", "serve", "--signature_def", "serving_default"),
                                  ("--tag_set", "serve", "--signature_def", "__saved_model_init_op"),
                                  ("--tag_set", "serve", "--list_ops"), ("--list_ops",), ("--all",)])
def test_text_is_saved_model_clis(models, capsys, args):
    """The same lines as ``saved_model_cli show`` for the same flags (``--all``: up to its "Concrete
    Functions" listing, which needs the model loaded and which we do not print)."""
    code, out, err = _show(capsys, "--dir", models["export"], *args)
    assert code == 0, err
    want = _saved_model_cli("--dir", models["export"], *args)
    if "--all" in args:
        want = want[:want.index("Concrete Functions:")]
        while want and not want[-1]:
            want.pop()
    assert _ops_as_sets(out.splitlines()) == _ops_as_sets(want)
    assert "Wrapped by" not in out  # our extras only behind our own flags


def test_text_spells_saved_model_clis_format(models, capsys):
    code, out, _ = _show(capsys, "--dir", models["export"], "--tag_set", "serve", "--signature_def", "serving_default")
    assert code == 0
    assert out.splitlines() == [
        "The given SavedModel SignatureDef contains the following input(s):",
        "  inputs['x'] tensor_info:", "      dtype: DT_FLOAT", "      shape: (-1, 784)",
        "      name: serving_default_x:0",
        "The given SavedModel SignatureDef contains the following output(s):",
        "  outputs['output_0'] tensor_info:", "      dtype: DT_FLOAT", "      shape: (-1, 10)",
        "      name: StatefulPartitionedCall_1:0",
        "Method name is: tensorflow/serving/predict"]
    code, out, _ = _show(capsys, "--dir", models["export"])
    assert out.splitlines() == ["The given SavedModel contains the following tag-sets:", "'serve'"]
    code, out, _ = _show(capsys, "--dir", models["export"], "--tfxla")
    assert code == 0 and out.endswith("\n\nNot wrapped by tfxla-plugin (no assets/tfxla_manifest.json)\n")


@pytest.mark.parametrize("args,message", [
    (["--tag_set", "serve", "--signature_def", "predict"], "no signature 'predict'; signatures: "),
    (["--signature_def", "predict", "--tfxla"], "no signature 'predict'; signatures: serving_default"),
    (["--tag_set", "serve,gpu"], "no MetaGraphDef with tag-set 'serve,gpu'; tag-sets: serve"),
])
def test_errors(models, capsys, args, message):
    code, out, err = _show(capsys, "--dir", models["saved_model"], *args)
    assert code == 1 and out == "" and err.startswith("tfxla show: ") and message in err


def test_missing_dir(tmp_path, capsys):
    code, _, err = _show(capsys, "--dir", tmp_path / "nope")
    assert code == 1 and "no such directory" in err


def test_clusters_of_a_plain_model(models, capsys):
    code, out, err = _show(capsys, "--dir", models["saved_model"], "--clusters", "--format", "json")
    assert code == 0, err
    summary = json.loads(out)["clusters"]["serving_default"]
    # the MLP compiles whole: every compute node is clustered; inputs, reads, NoOp are not counted
    assert summary["nodes_in_graph"] > summary["nodes_total"] == summary["nodes_clustered"] > 0
    assert summary["percent_clustered"] == 100.0 and summary["not_counted"]["Placeholder"] >= 1
    ops = {op for c in summary["clusters"] for op in c["op_types"]}
    assert {"MatMul", "Relu", "Softmax"} <= ops
    assert all(c["kernel_hash"] for c in summary["clusters"])  # compiled, as explain_json reports
    code, out, _ = _show(capsys, "--dir", models["saved_model"], "--clusters")
    assert code == 0 and "Clustering summary: " in out and "HLO of cluster_0: " in out


# --- a hand-made wrapped model -----------------------------------------------------------------

def _clustering_summary():
    """A real ClusteringResult of a small function (what a wrapped model stores per signature)."""
    @tf.function
    def f(x):
        return tf.nn.relu(tf.matmul(x, tf.ones([4, 4])) + 1.0) * 2.0 - tf.reduce_sum(x)

    return pipeline.analyze_function(f.get_concrete_function(tf.TensorSpec([2, 4], tf.float32)))


@pytest.fixture
def wrapped(models, tmp_path):
    path = tmp_path / "wrapped"
    shutil.copytree(models["export"], path)
    assets = path / "assets"
    assets.mkdir(exist_ok=True)
    result = _clustering_summary()
    so, c = b"\x7fELF" + bytes(3000), b"int main(void) { return 0; }\n" * 10
    (assets / "k_aaaaaaaaaaaa.so").write_bytes(so)
    (assets / "k_aaaaaaaaaaaa.c").write_bytes(c)
    (assets / "k_aaaaaaaaaaaa.hlo.txt").write_text("HloModule m\n")
    manifest = {
        "format": "tfxla-wrapped-savedmodel/1", "tfxla_version": "0.1.0", "tf_version": tf.__version__,
        "backend": "cpu", "source": "/abs/original", "frozen": False, "jit_compile": "auto",
        "cpu_features": ["avx2", "avx512f"],
        "signatures": {"serving_default": {
            "inputs": {"x": {"dtype": "float32", "shape": [None, 784]}},
            "outputs": {"output_0": {"dtype": "float32", "shape": [None, 10]}},
            "batch_tiles": [1, 8], "clustering": pipeline.summary_json(result),
            "clusters": [{"name": "cluster_0", "hlo_ops": 42, "batch_polymorphic": True, "note": "",
                          "kernels": ["k_aaaaaaaaaaaa", "k_bbbbbbbbbbbb"]}]}},
        "kernels": {
            "k_aaaaaaaaaaaa": {"signature": "serving_default", "cluster": "cluster_0", "batch_tile": 1,
                               "so": "k_aaaaaaaaaaaa.so", "so_sha256": hashlib.sha256(so).hexdigest(),
                               "c": "k_aaaaaaaaaaaa.c", "c_sha256": hashlib.sha256(c).hexdigest(),
                               "hlo": "k_aaaaaaaaaaaa.hlo.txt", "compile_seconds": 1.25,
                               "rebuild_argv": ["gcc", "-O3", "{source}", "-o", "{output}"]},
            "k_bbbbbbbbbbbb": {"signature": "serving_default", "cluster": "cluster_0", "batch_tile": 8,
                               "so": "k_bbbbbbbbbbbb.so", "so_sha256": "f" * 64, "c": "k_bbbbbbbbbbbb.c",
                               "c_sha256": "e" * 64, "hlo": "k_bbbbbbbbbbbb.hlo.txt", "compile_seconds": 2.0}},
    }
    (assets / "tfxla_manifest.json").write_text(json.dumps(manifest))
    return path, manifest, result, so, c


def test_wrapped_text(wrapped, capsys):
    path, manifest, _, so, c = wrapped
    clustering = manifest["signatures"]["serving_default"]["clustering"]
    code, out, err = _show(capsys, "--dir", path, "--signature_def", "serving_default", "--tfxla")
    assert code == 0, err
    assert "Wrapped by tfxla-plugin 0.1.0 (tfxla-wrapped-savedmodel/1): TF " in out
    assert "backend cpu, jit_compile auto, variables kept as variables" in out
    assert "cpu features: avx2 avx512f" in out
    assert (f"signature_def['serving_default']: 1 cluster(s), {clustering['nodes_clustered']} of "
            f"{clustering['nodes_total']} nodes clustered ({clustering['percent_clustered']}%), batch tiles [1, 8]") in out
    assert "  cluster_0: 42 HLO ops, batch-polymorphic, 2 kernel(s)" in out
    sha_so, sha_c = hashlib.sha256(so).hexdigest()[:12], hashlib.sha256(c).hexdigest()[:12]
    assert (f"    k_aaaaaaaaaaaa: batch tile 1, .so {len(so) / 1024:.1f} KiB sha256 {sha_so}, .c {len(c)} B sha256 "
            f"{sha_c}, .hlo.txt 12 B, compiled in 1.25 s") in out
    assert f"    k_bbbbbbbbbbbb: batch tile 8, .so missing sha256 {'f' * 12}, .c missing" in out
    assert "      rebuilt where it cannot be used with: gcc -O3 {source} -o {output}\n" in out
    assert "      no rebuild command (wrapped by an older tfxla-plugin: re-wrap it to let the op rebuild its kernels)" \
        in out  # k_bbbbbbbbbbbb's entry has none


def test_wrapped_json(wrapped, capsys):
    path, manifest, _, so, c = wrapped
    code, out, err = _show(capsys, "--dir", path, "--format", "json")
    assert code == 0, err
    doc = json.loads(out)["wrapped"]
    assert doc["format"] == "tfxla-wrapped-savedmodel/1" and doc["cpu_features"] == ["avx2", "avx512f"]
    sig = doc["signatures"]["serving_default"]
    clustering = manifest["signatures"]["serving_default"]["clustering"]
    assert (sig["nodes_clustered"], sig["nodes_total"]) == (clustering["nodes_clustered"], clustering["nodes_total"])
    assert sig["clusters"] == manifest["signatures"]["serving_default"]["clusters"]
    a, b = doc["kernels"]["k_aaaaaaaaaaaa"], doc["kernels"]["k_bbbbbbbbbbbb"]
    assert (a["so"]["bytes"], a["c"]["bytes"], a["hlo"]["bytes"]) == (len(so), len(c), 12)
    assert a["so"]["sha256"] == hashlib.sha256(so).hexdigest()
    assert b["so"]["bytes"] is None and b["batch_tile"] == 8


@pytest.mark.skipif(not hasattr(pipeline, "render"),
                    reason="needs graph_passes.pipeline.render(summary_json dict) (requested from the lead)")
def test_wrapped_clusters_render_like_the_pipeline_summary(wrapped, capsys):
    path, _, result, _, _ = wrapped
    code, out, err = _show(capsys, "--dir", path, "--signature_def", "serving_default", "--clusters")
    assert code == 0, err
    assert pipeline.summary(result) in out
    code, out, _ = _show(capsys, "--dir", path, "--signature_def", "serving_default", "--clusters", "--format", "json")
    assert json.loads(out)["clusters"]["serving_default"] == json.loads(json.dumps(pipeline.summary_json(result)))


def test_show_does_not_need_the_model_to_load(wrapped, capsys):
    """A wrapped model shows from its files alone (here its variables are gone)."""
    path, *_ = wrapped
    shutil.rmtree(path / "variables")
    code, out, _ = _show(capsys, "--dir", path, "--tfxla")
    assert code == 0 and "cluster_0: 42 HLO ops" in out


def _set(manifest: dict, path: str, value) -> dict:
    """``manifest`` with the field at dotted ``path`` (``kernels.k_a.so``; ``.0`` indexes a list) set."""
    *parents, last = path.split(".")
    node = manifest
    for key in parents:
        node = node[int(key)] if isinstance(node, list) else node[key]
    node[int(last) if isinstance(node, list) else last] = value
    return manifest


KA = "kernels.k_aaaaaaaaaaaa"
SD = "signatures.serving_default"


@pytest.mark.parametrize("field, value, message", [
    (None, "{not json", "tfxla_manifest.json is not valid JSON: "),
    (None, b"\xff\xfe{}", "tfxla_manifest.json is not valid JSON: "),
    (None, [], "is malformed: the manifest must be an object, not list"),
    ("kernels", [], "is malformed: kernels must be an object, not list"),
    (f"{KA}.so", 5, "is malformed: kernels['k_aaaaaaaaaaaa'].so must be a file name, not int"),
    (f"{KA}.so", "../../../../../../etc/passwd", "kernels['k_aaaaaaaaaaaa'].so is not a plain file name inside "
                                                 "assets/"),
    (f"{KA}.c", "/etc/passwd", "kernels['k_aaaaaaaaaaaa'].c is not a plain file name inside assets/"),
    (f"{KA}.hlo", "..", "kernels['k_aaaaaaaaaaaa'].hlo is not a plain file name inside assets/"),
    (f"{KA}.so_sha256", 7, "kernels['k_aaaaaaaaaaaa'].so_sha256 must be a string, not int"),
    (f"{KA}.batch_tile", True, "kernels['k_aaaaaaaaaaaa'].batch_tile must be an integer, not bool"),
    (f"{SD}.clusters", "cluster_0", "signatures['serving_default'].clusters must be a list, not str"),
    (f"{SD}.clusters.0.kernels", [1], "signatures['serving_default'].clusters[0].kernels[0] must be a string, "
                                      "not int"),
    (f"{SD}.clustering.nodes_total", "many", "signatures['serving_default'].clustering.nodes_total must be an "
                                             "integer, not str"),
    ("cpu_features", "avx2", "cpu_features must be a list, not str"),
    (f"{KA}.rebuild_argv", "gcc x.c", "kernels['k_aaaaaaaaaaaa'].rebuild_argv must be a list, not str"),
    ("signatures.serving_default", [], "signatures['serving_default'] must be an object, not list"),
])
def test_a_malformed_manifest_is_one_clear_line(wrapped, capsys, field, value, message):
    path, manifest, *_ = wrapped
    file = path / "assets" / "tfxla_manifest.json"
    if field is None:
        file.write_bytes(value if isinstance(value, bytes) else value.encode() if isinstance(value, str)
                         else json.dumps(value).encode())
    else:
        file.write_text(json.dumps(_set(manifest, field, value)))
    for flags in (["--tfxla"], ["--format", "json"]):
        code, out, err = _show(capsys, "--dir", path, *flags)
        assert (code, out) == (1, "") and err.startswith(f"tfxla show: --dir {path}: ") and message in err, err
        assert len(err.strip().splitlines()) == 1 and "Traceback" not in err and "/etc" not in err
    code, out, _ = _show(capsys, "--dir", path)  # saved_model_cli's part reads no manifest
    assert code == 0 and out.splitlines() == ["The given SavedModel contains the following tag-sets:", "'serve'"]


def test_links_out_of_the_model_directory_are_not_followed(wrapped, tmp_path, capsys):
    path, manifest, *_ = wrapped
    secret = tmp_path / "secret_outside.so"
    secret.write_bytes(b"\x7fELF" + bytes(12345))
    kernel = path / "assets" / "k_aaaaaaaaaaaa.so"
    kernel.unlink()
    kernel.symlink_to(secret)
    code, out, err = _show(capsys, "--dir", path, "--tfxla")
    assert (code, out) == (1, "") and err == (f"tfxla show: --dir {path}: assets/k_aaaaaaaaaaaa.so leads outside the "
                                              f"model directory (a link); not shown\n")
    manifest_file = path / "assets" / "tfxla_manifest.json"
    outside = tmp_path / "manifest_outside.json"
    outside.write_text(manifest_file.read_text())
    manifest_file.unlink()
    manifest_file.symlink_to(outside)
    code, out, err = _show(capsys, "--dir", path, "--format", "json")
    assert (code, out) == (1, "") and "tfxla_manifest.json leads outside the model directory" in err
    assert "outside.json" not in err and "secret" not in err


@pytest.mark.skipif(not hasattr(pipeline, "render"), reason="needs graph_passes.pipeline.render")
def test_a_clustering_summary_that_cannot_be_rendered_is_one_line(wrapped, capsys):
    path, manifest, *_ = wrapped
    (path / "assets" / "tfxla_manifest.json").write_text(json.dumps(_set(manifest, f"{SD}.clustering",
                                                                         {"nodes_total": 3})))
    code, out, err = _show(capsys, "--dir", path, "--clusters")
    assert (code, out) == (1, "") and len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert err.startswith(f"tfxla show: --dir {path}: signature 'serving_default': assets/tfxla_manifest.json is "
                          f"malformed: its clustering summary cannot be rendered (KeyError: ")


@pytest.mark.slow
def test_show_and_run_a_model_wrapped_by_tfxla(models, tmp_path, capsys):
    """The real ``tfxla_plugin.saved_model.wrap`` output: shown from its manifest, run like the original."""
    from tfxla_plugin import saved_model

    path = tmp_path / "wrapped"
    saved_model.wrap(models["export"], path, signatures=["serving_default"], progress=False)
    manifest = saved_model.read_manifest(path)
    code, out, err = _show(capsys, "--dir", path, "--format", "json")
    assert code == 0, err
    doc = json.loads(out)["wrapped"]
    clustering = manifest["signatures"]["serving_default"]["clustering"]
    assert doc["signatures"]["serving_default"]["nodes_total"] == clustering["nodes_total"] > 0
    assert set(doc["kernels"]) == set(manifest["kernels"]) and doc["kernels"]
    for key, kernel in doc["kernels"].items():
        for kind in ("so", "c", "hlo"):
            file = path / "assets" / manifest["kernels"][key][kind]
            assert kernel[kind]["bytes"] == file.stat().st_size > 0
        assert kernel["so"]["sha256"] == hashlib.sha256((path / "assets" / kernel["so"]["file"]).read_bytes()).hexdigest()
    code, out, _ = _show(capsys, "--dir", path, "--tfxla")
    assert code == 0 and f"{clustering['nodes_clustered']} of {clustering['nodes_total']} nodes clustered" in out
    x = saved_models.example_inputs(models["export"], 3)["x"]
    np.save(tmp_path / "x.npy", x)
    assert cli.main(["run", "--dir", str(path), "--inputs", f"x={tmp_path / 'x.npy'}", "--outdir",
                     str(tmp_path / "out")]) == 0
    want = tf.saved_model.load(str(models["export"])).signatures["serving_default"](x=tf.constant(x))["output_0"]
    np.testing.assert_allclose(np.load(tmp_path / "out" / "output_0.npy"), want.numpy(), rtol=1e-5, atol=1e-6)
