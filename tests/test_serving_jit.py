"""``tfxla serve --jit``: a plain SavedModel served through the Grappler hook (docs/serving.md, "--jit").

The hook is process-wide and loads a native plugin, so every ``--jit`` server is a child process
(``python -m tfxla_plugin.cli serve``, as in tests/test_serving_http.py). Answers are compared with the
same signatures run by TensorFlow here, in the pytest process, without the hook.

- a plain model: its static-shape signature and its ``None``-batch one (traced per input shape,
  ``serving.model.PerShape``) run our kernels (``/stats``' ``jit``: a graph rewritten and a cluster
  compiled per signature and shape; the log says the hook is on, then its counters after the first
  call); a second server on the
  same kernel cache, the hook on through ``TFXLA_FLAGS=--auto_jit=1``, compiles nothing (every cluster a
  kernel cache hit), serving the model as a version of a ``--model_base_path`` and answering gRPC too;
- a wrapped model with ``--jit``: the hook leaves its graphs (which hold ``TfxlaLaunch``) alone;
- a compile failure injected into the server process: requests are still answered, by TF, with one
  WARNING per graph in the log;
- ``PerShape`` (in this process, no hook): the first ``limit`` shapes get a trace, later ones run the
  signature as given, with the same answers.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import httpx
import numpy as np
import pytest

from tests.test_serving_http import grpc_address, server, wait_stopped
from tfxla_plugin.serving import grpc_api

pytestmark = pytest.mark.slow
TOL = 1e-5  # float32 matmul + softmax against TF: the same sums, maybe in another order
INJECT = """
import sys
import tfxla_plugin.compiled_graph as compiled_graph

def broken(analysis, flags):
    raise RuntimeError("injected compile failure")

compiled_graph.compile_clusters = broken
from tfxla_plugin.cli import main
sys.exit(main(sys.argv[1:]))
"""


@pytest.fixture(scope="module")
def plain(tmp_path_factory) -> Path:
    """signatures ``serving_default`` (x: float32[2, 8] -> y, static shapes) and ``dynamic`` (x: [None, 8] -> z)."""
    import tensorflow as tf

    class Model(tf.Module):
        def __init__(self):
            self.w = tf.Variable(np.linspace(-1, 1, 32, dtype=np.float32).reshape(8, 4))

        @tf.function(input_signature=[tf.TensorSpec([2, 8], tf.float32, name="x")])
        def static(self, x):
            return {"y": tf.nn.softmax(tf.nn.relu(tf.matmul(x, self.w)) + 1.0)}

        @tf.function(input_signature=[tf.TensorSpec([None, 8], tf.float32, name="x")])
        def dynamic(self, x):
            return {"z": tf.tanh(tf.matmul(x, self.w) + 0.5) * 2.0}

    model, path = Model(), tmp_path_factory.mktemp("serving_jit") / "plain"
    tf.saved_model.save(model, str(path), signatures={"serving_default": model.static, "dynamic": model.dynamic})
    return path


@pytest.fixture(scope="module")
def expected(plain):
    import tensorflow as tf

    sigs = tf.saved_model.load(str(plain)).signatures
    return {name: (lambda x, fn=fn: {k: v.numpy() for k, v in fn(x=x).items()}) for name, fn in sigs.items()}


def jit_server(model_dir: Path, log_path: Path, cache: Path, inject: bool = False, auto_jit: bool = False,
               base_path: Path | None = None):
    """``tfxla serve --jit`` (``auto_jit``: ``TFXLA_FLAGS=--auto_jit=1`` instead of the flag; ``inject``: every
    cluster compile raises; ``base_path``: ``--model_base_path`` instead of ``--dir``); a context manager
    yielding (process, URL)."""
    entry = ("-c", INJECT) if inject else ("-m", "tfxla_plugin.cli")
    flags = ["--num_workers", "2", *([] if auto_jit else ["--jit"])]
    if base_path is not None:
        model_dir, flags = None, [*flags, "--model_base_path", str(base_path), "--model_name", "one"]
    env = {"TFXLA_FLAGS": f"--cache_dir={cache}" + (" --auto_jit=1" if auto_jit else "")}
    return server(model_dir, log_path, *flags, entry=entry, env=env)


def grpc_predict(log_path: Path, x: np.ndarray) -> tuple[int, np.ndarray]:
    """(version, output 'y') of serving_default for ``x`` through the official gRPC stub."""
    import grpc
    import tensorflow as tf
    from tensorflow_serving.apis import predict_pb2, prediction_service_pb2_grpc

    request = predict_pb2.PredictRequest()
    request.model_spec.name = "one"
    request.inputs["x"].CopyFrom(tf.make_tensor_proto(x))
    with grpc.insecure_channel(grpc_address(log_path)) as channel:
        r = prediction_service_pb2_grpc.PredictionServiceStub(channel).Predict(request, timeout=120)
    return r.model_spec.version.value, tf.make_ndarray(r.outputs["y"])


def predict(url: str, x: np.ndarray, signature: str = "serving_default") -> np.ndarray:
    """The signature's one output for ``x`` (columnar format: ``outputs`` is its value)."""
    r = httpx.post(f"{url}/v1/models/one:predict", json={"signature_name": signature, "inputs": {"x": x.tolist()}},
                   timeout=120)
    assert r.status_code == 200, r.text
    return np.asarray(r.json()["outputs"], np.float32)


def check_answers(url: str, expected, seed: int) -> None:
    rng = np.random.default_rng(seed)
    for _ in range(3):  # the first call compiles; later ones run the cached kernels
        x = rng.standard_normal((2, 8)).astype(np.float32)
        np.testing.assert_allclose(predict(url, x), expected["serving_default"](x)["y"], rtol=TOL, atol=TOL)
    for rows in (1, 3):
        x = rng.standard_normal((rows, 8)).astype(np.float32)
        np.testing.assert_allclose(predict(url, x, "dynamic"), expected["dynamic"](x)["z"], rtol=TOL, atol=TOL)


def jit_stats(url: str) -> dict:
    stats = httpx.get(f"{url}/v1/models/one/stats").json()
    assert stats["jit"] is not None, stats
    return stats["jit"]


def warnings(text: str) -> list[str]:
    """The WARNING lines Python's logging wrote (not TF's own C++ log preamble)."""
    return [line for line in text.splitlines() if " WARNING " in line]


def stop(proc: subprocess.Popen, log_path: Path) -> str:
    proc.send_signal(signal.SIGTERM)
    wait_stopped(proc, log_path)
    return log_path.read_text()


def test_a_plain_model_runs_tfxla_kernels_compiled_once_and_cached_on_disk(plain, expected, tmp_path):
    cache = tmp_path / "kernels"
    log_path = tmp_path / "serve.log"
    with jit_server(plain, log_path, cache) as (proc, url):
        assert "the Grappler hook is on" in log_path.read_text()
        assert ", jit) at http://127.0.0.1:" in log_path.read_text()
        check_answers(url, expected, seed=0)
        stats = jit_stats(url)
        text = stop(proc, log_path)
    # One graph per signature and input shape: serving_default's [2, 8], dynamic's [1, 8] and [3, 8].
    assert stats["graphs_rewritten"] == 3 and stats["clusters_compiled"] == 3, stats
    assert stats["shapes"] == {"dynamic": 2, "serving_default": 1}, stats
    assert stats["kernel_cache_hits"] == 0 and stats["left_alone"] == {}, stats  # a fresh cache directory
    assert "tfxla hook: rewrote" in text and not warnings(text), text
    assert "after the first call of signature 'serving_default': graphs seen" in text, text

    log_path = tmp_path / "serve_again.log"
    # Another process, the same kernel cache, the hook turned on by TFXLA_FLAGS rather than --jit, the model
    # as version 7 of a --model_base_path, asked over REST and gRPC.
    shutil.copytree(plain, tmp_path / "base" / "7")
    with jit_server(plain, log_path, cache, auto_jit=True, base_path=tmp_path / "base") as (proc, url):
        text = log_path.read_text()
        assert "model 'one' version 7 (" in text and ", jit) at http://127.0.0.1:" in text
        check_answers(url, expected, seed=1)
        x = np.random.default_rng(4).standard_normal((2, 8)).astype(np.float32)
        if grpc_api.missing() is None:  # the README's test install has the gRPC packages
            version, y = grpc_predict(log_path, x)
            assert version == 7
            np.testing.assert_allclose(y, expected["serving_default"](x)["y"], rtol=TOL, atol=TOL)
        again = jit_stats(url)
        stop(proc, log_path)
    assert again["clusters_compiled"] == stats["clusters_compiled"], (stats, again)
    assert again["kernel_cache_hits"] == again["clusters_compiled"], again


def test_a_wrapped_model_is_left_alone_by_the_hook(plain, expected, tmp_path):
    from tfxla_plugin import saved_model

    wrapped = tmp_path / "wrapped"
    saved_model.wrap(plain, wrapped, signatures=["serving_default"], progress=False)
    log_path = tmp_path / "serve_wrapped.log"
    with jit_server(wrapped, log_path, tmp_path / "kernels") as (proc, url):
        assert ", wrapped, jit) at" in log_path.read_text()
        x = np.random.default_rng(2).standard_normal((2, 8)).astype(np.float32)
        for _ in range(2):
            np.testing.assert_allclose(predict(url, x), expected["serving_default"](x)["y"], rtol=TOL, atol=TOL)
        stats = jit_stats(url)
        stop(proc, log_path)
    assert stats["clusters_compiled"] == 0 and stats["graphs_rewritten"] == 0, stats
    assert stats["left_alone"].get("already holds TfxlaLaunch nodes", 0) >= 1, stats


def test_a_failing_compile_leaves_the_requests_answered_by_tensorflow(plain, expected, tmp_path):
    log_path = tmp_path / "serve_failing.log"
    with jit_server(plain, log_path, tmp_path / "kernels", inject=True) as (proc, url):
        check_answers(url, expected, seed=3)
        stats = jit_stats(url)
        text = stop(proc, log_path)
    assert stats["clusters_compiled"] == 0 and stats["graphs_rewritten"] == 0, stats
    assert stats["left_alone"] == {"failed: RuntimeError": 3}, stats  # each graph once, not once per request
    lines = warnings(text)
    assert len(lines) == 3 and all("left to TensorFlow: RuntimeError: injected compile failure" in line
                                   for line in lines), text


def test_per_shape_traces_the_first_shapes_and_runs_the_others_as_given():
    import tensorflow as tf

    from tfxla_plugin.serving.model import PerShape

    traced, direct = [], []

    def fn(x):
        (traced if isinstance(x, tf.Tensor) and not tf.executing_eagerly() else direct).append(x.shape)
        return {"y": tf.reduce_sum(tf.convert_to_tensor(x) * 2.0, axis=1)}

    per_shape = PerShape(fn, limit=2)
    for rows in (1, 3, 1, 5, 5, 3):
        x = np.arange(rows * 4, dtype=np.float32).reshape(rows, 4)
        np.testing.assert_array_equal(per_shape(x=x)["y"].numpy(), (x * 2.0).sum(axis=1))
    assert [tuple(s) for s in traced] == [(1, 4), (3, 4)] and direct == [(5, 4), (5, 4)], (traced, direct)
    assert per_shape.shapes == 2
