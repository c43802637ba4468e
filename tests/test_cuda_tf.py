"""The CUDA backend inside TensorFlow: ``function(..., backend="cuda")``, ``--backend=cuda`` and
``saved_model.wrap(..., backend="cuda")`` rewrite clusters into TfxlaLaunch nodes whose kernels are CUDA
host launchers (``backends/cuda/host_launcher.py``).

On this CPU-only machine the real launchers are compiled by nvcc and calling them raises TensorFlow's
FailedPreconditionError with the kernel's "no usable CUDA device" message, never a crash. The numbers are checked
by swapping the cuda backend's build for the emulated launcher (the same host code on the host
emulator, ``host_emulator.compile_emulated_launcher``): the TfxlaLaunch op then runs the launcher's real
ABI, buffer copies and host control flow, and the results match TensorFlow, per shape, batch-tiled and
through a wrapped SavedModel.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import sys
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf

import tfxla_plugin
from tfxla_plugin.cluster_compiler import source_header
from backends.cuda.codegen import generate
from backends.cuda.compiler import NvccNotFound
from backends.cuda.host_emulator import compile_emulated_launcher
from backends.cuda.host_launcher import launcher_source
from tests.gpu.cases import have_cuda_device
import backends
from backends import Executable
from tfxla_plugin import saved_model
from tfxla_plugin.cli import main as cli_main

pytestmark = pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not installed")
GPU = have_cuda_device()
needs_no_gpu = pytest.mark.skipif(GPU is None, reason="a CUDA device is present: the kernels run here")
NO_DEVICE = "no usable CUDA device"
RNG = np.random.default_rng(0)


def _emulated_build(module, options=None) -> Executable:
    launcher = launcher_source(generate(module))
    built = compile_emulated_launcher(launcher, options.cache_dir if options is not None else None)
    return Executable("cuda", Path(built.path), launcher.text, built.cache_hit, launcher.signature, "(emulated)", None)


@pytest.fixture
def emulated_cuda(monkeypatch):
    """The cuda backend with its launchers built for the host emulator (same ABI, same host code)."""
    monkeypatch.setattr(backends.get("cuda"), "compile", _emulated_build)


def _mlp(x, w):
    return tf.nn.softmax(tf.nn.relu(tf.matmul(x, w) + 0.5))


def _loop(x, w):
    y = tf.matmul(x, w) + 0.5
    _, y = tf.while_loop(lambda i, y: i < 3, lambda i, y: (i + 1, y * 0.5 + tf.reduce_max(y)), (tf.constant(0), y))
    return tf.nn.softmax(y), tf.reduce_sum(y, axis=0)


def _args(batch: int = 4):
    return (tf.constant(RNG.standard_normal((batch, 6)).astype(np.float32)),
            tf.constant(RNG.standard_normal((6, 5)).astype(np.float32)))


def _ops(graph_def) -> set[str]:
    return {n.op for n in graph_def.node} | {n.op for f in graph_def.library.function for n in f.node_def}


# --- tfxla_plugin.function ------------------------------------------------------------------------

def test_function_on_cuda_launches_cuda_kernels_and_says_so(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("TFXLA_FLAGS", f"--dump_to={tmp_path}")
    f = tfxla_plugin.function(_mlp, backend="cuda")
    x, w = _args()
    graph = f.compiled_graph(x, w)
    assert "TfxlaLaunch" in _ops(graph.rewritten.graph_def) and "MatMul" not in _ops(graph.rewritten.graph_def)
    (cluster,) = graph.clusters
    assert cluster.backend == "cuda" and cluster.kernel_path.endswith(".so")
    assert cluster.signature["backend"] == "cuda" and cluster.signature["scratch_bytes"] == 0
    source = f.experimental_get_compiler_ir(x, w)(stage="c")
    assert '__global__' in source and "TFXLA_EXPORT int tfxla_init" in source and source == cluster.c_source
    assert "; cuda kernel " in f.explain(x, w)
    assert json.loads(f.explain(x, w, format="json"))["clusters"][0]["backend"] == "cuda"
    assert not [m for m in sys.modules if m.startswith("pycuda")]  # the launcher path never needs PyCUDA
    (dumped,) = tmp_path.glob("module_*.cu")
    assert dumped.read_text() == source_header("cluster_0", cluster.optimized) + source and "host program:" in next(tmp_path.glob("*buffer-assignment.txt")).read_text()


@needs_no_gpu
def test_calling_it_without_a_gpu_raises_a_clear_tensorflow_error() -> None:
    f = tfxla_plugin.function(_mlp, backend="cuda")
    x, w = _args()
    for _ in range(2):  # a failed load is not cached: the second call says the same
        with pytest.raises(tf.errors.FailedPreconditionError, match=f"tfxla_init failed: backend=cuda: {NO_DEVICE}"):
            f(x, w)
    with pytest.raises(tf.errors.FailedPreconditionError, match=NO_DEVICE):
        tf.function(lambda: f(x, w))()  # inside a graph too


def test_the_backend_flag_compiles_cuda_kernels(monkeypatch) -> None:
    monkeypatch.setenv("TFXLA_FLAGS", "--backend=cuda")
    f = tfxla_plugin.function(lambda x: tf.exp(x) * 2.0)
    assert [c.backend for c in f.compiled_graph(tf.constant([1.0, 2.0])).clusters] == ["cuda"]


def test_no_nvcc_is_a_clear_error_before_compiling(monkeypatch, tmp_path) -> None:
    monkeypatch.setenv("TFXLA_NVCC", str(tmp_path / "missing" / "nvcc"))
    with pytest.raises(NvccNotFound, match="backend=cuda needs nvcc"):
        tfxla_plugin.function(_mlp, backend="cuda")(*_args())
    with pytest.raises(NvccNotFound, match="backend=cuda needs nvcc"):
        saved_model.wrap(tmp_path / "nowhere", tmp_path / "out", backend="cuda", progress=False)
    assert cli_main(["wrap", "--dir", str(tmp_path / "nowhere"), "--output_dir", str(tmp_path / "o"), "--quiet",
                     "--backend", "cuda"]) == 1


def test_emulated_cuda_kernels_match_tensorflow_per_shape(emulated_cuda) -> None:
    f = tfxla_plugin.function(_loop, backend="cuda")
    x, w = _args()
    assert f.compiled_graph(x, w).clusters[0].backend == "cuda"
    for got, want in zip(f(x, w), _loop(x, w)):
        np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-5, atol=1e-6)


def test_emulated_cuda_kernels_serve_every_batch_size(emulated_cuda) -> None:
    spec = [tf.TensorSpec([None, 6], tf.float32), tf.TensorSpec([6, 5], tf.float32)]
    f = tfxla_plugin.function(_mlp, backend="cuda", input_signature=spec)
    for batch in (1, 3, 8, 11):
        x, w = _args(batch)
        np.testing.assert_allclose(f(x, w).numpy(), _mlp(x, w).numpy(), rtol=1e-5, atol=1e-6)
    assert f.compiled_graph(*_args(2)).tiling is not None


def _depthwise(x, w, b):
    return tf.nn.relu6(tf.nn.depthwise_conv2d(x, w, [1, 1, 1, 1], "SAME") + b)


def test_an_emulated_depthwise_convolution_gets_its_kernel_and_matches_tensorflow(emulated_cuda) -> None:
    x, w, b = (tf.constant(RNG.standard_normal(s).astype(np.float32)) for s in ((2, 9, 11, 8), (3, 3, 8, 2), (16,)))
    f = tfxla_plugin.function(_depthwise, backend="cuda")
    assert "depthwise convolution: 16 features (8 inputs x multiplier 2)" in f.experimental_get_compiler_ir(x, w, b)(stage="c")
    np.testing.assert_allclose(f(x, w, b).numpy(), _depthwise(x, w, b).numpy(), rtol=1e-5, atol=1e-5)


# --- SavedModels ----------------------------------------------------------------------------------

class _Model(tf.Module):
    def __init__(self):
        super().__init__()
        rng = np.random.default_rng(1)
        self.w = tf.Variable(rng.standard_normal((12, 16)).astype(np.float32))
        self.b = tf.Variable(rng.standard_normal(16).astype(np.float32))

    @tf.function(input_signature=[tf.TensorSpec([None, 12], tf.float32, name="x")])
    def serve(self, x):
        return {"y": tf.nn.softmax(tf.nn.relu(tf.matmul(x, self.w) + self.b))}


@pytest.fixture(scope="module")
def source_model(tmp_path_factory) -> Path:
    src = tmp_path_factory.mktemp("cuda_wrap") / "src"
    model = _Model()
    tf.saved_model.save(model, str(src), signatures={"serving_default": model.serve})
    return src


@pytest.fixture(scope="module")
def wrapped(source_model) -> Path:
    dst = source_model.parent / "dst"
    saved_model.wrap(source_model, dst, backend="cuda", progress=False)
    return dst


def _launch_nodes(path: Path) -> list:
    gd = tf.saved_model.load(str(path)).signatures["serving_default"].graph.as_graph_def()
    return [n for n in list(gd.node) + [n for f in gd.library.function for n in f.node_def] if n.op == "TfxlaLaunch"]


def test_a_cuda_wrap_ships_launchers_and_their_cuda_sources(wrapped) -> None:
    manifest = saved_model.read_manifest(wrapped)
    assert manifest["backend"] == "cuda" and manifest["cpu_features"] == []
    assets = wrapped / "assets"
    assert not list(assets.glob("*.c"))
    assert len(manifest["kernels"]) == 2  # batch tiles 1 and 8
    for kid, k in manifest["kernels"].items():
        assert k["so"] == f"{kid}.so" and k["cu"] == f"{kid}.cu" and "c" not in k
        assert hashlib.sha256((assets / k["cu"]).read_bytes()).hexdigest() == k["cu_sha256"]
        assert hashlib.sha256((assets / k["so"]).read_bytes()).hexdigest() == k["so_sha256"]
        assert "TFXLA_EXPORT int tfxla_run" in (assets / k["cu"]).read_text()
    (node,) = _launch_nodes(wrapped)
    # the op can rebuild a launcher from its .cu: it runs the recorded nvcc command itself
    assert list(node.attr["kernel_hashes"].list.s) and list(node.attr["source_hashes"].list.s)
    assert node.attr["backend"].s == b"cuda" and node.attr["source_suffix"].s == b".cu"
    commands = [json.loads(c) for c in node.attr["rebuild_commands"].list.s]
    assert commands == [k["rebuild_argv"] for k in sorted(manifest["kernels"].values(), key=lambda k: k["batch_tile"])]
    assert all(Path(c[0]).name == "nvcc" and "-shared" in c and "{source}" in c and "{output}" in c for c in commands)


@needs_no_gpu
def test_a_cuda_wrapped_model_loads_and_calling_it_is_a_clear_error(wrapped) -> None:
    sig = tf.saved_model.load(str(wrapped)).signatures["serving_default"]
    with pytest.raises(tf.errors.FailedPreconditionError, match=NO_DEVICE):
        sig(x=tf.zeros((3, 12)))


def test_a_changed_cuda_kernel_is_rebuilt_from_its_cuda_source(wrapped, tmp_path, monkeypatch, capfd) -> None:
    moved = tmp_path / "moved"
    shutil.copytree(wrapped, moved)
    manifest = saved_model.read_manifest(moved)
    (k,) = [k for k in manifest["kernels"].values() if k["batch_tile"] == 1]  # the op loads tile 1 first
    so = moved / "assets" / k["so"]
    so.write_bytes(so.read_bytes() + b"\0")
    sig = tf.saved_model.load(str(moved)).signatures["serving_default"]
    if have_cuda_device() is None:
        sig(x=tf.zeros((1, 12)))
    else:  # rebuilt with nvcc, loaded, and then the missing device is the error
        with pytest.raises(tf.errors.FailedPreconditionError, match=NO_DEVICE):
            sig(x=tf.zeros((1, 12)))
    err = capfd.readouterr().err
    assert f"kernel '{so}'" in err and f"rebuilt it from its source '{moved / 'assets' / k['cu']}' (" in err, err[-2000:]
    assert f"nvcc -shared " in err


def test_a_cuda_kernel_with_a_changed_source_too_is_refused(wrapped, tmp_path) -> None:
    moved = tmp_path / "moved"
    shutil.copytree(wrapped, moved)
    for k in saved_model.read_manifest(moved)["kernels"].values():
        for name in (k["so"], k["cu"]):
            path = moved / "assets" / name
            path.write_bytes(path.read_bytes() + b"\n")
    sig = tf.saved_model.load(str(moved)).signatures["serving_default"]
    with pytest.raises(tf.errors.DataLossError, match=r"\.cu' has sha256 .* refusing to load or rebuild"):
        sig(x=tf.zeros((1, 12)))


def test_cli_wrap_with_the_cuda_backend_and_show(source_model, wrapped, tmp_path, capsys) -> None:
    out = tmp_path / "cli"
    assert cli_main(["wrap", "--dir", str(source_model), "--output_dir", str(out), "--quiet",
                     "--backend", "cuda"]) == 0
    capsys.readouterr()
    assert cli_main(["show", "--dir", str(out), "--tfxla"]) == 0
    text = capsys.readouterr().out
    assert "backend cuda" in text and ".cu " in text and ", .c " not in text


def test_an_emulated_cuda_wrap_matches_the_original(source_model, emulated_cuda, tmp_path) -> None:
    dst = tmp_path / "emulated"
    saved_model.wrap(source_model, dst, backend="cuda", progress=False)
    original = tf.saved_model.load(str(source_model)).signatures["serving_default"]
    sig = tf.saved_model.load(str(dst)).signatures["serving_default"]
    for batch in (1, 3, 8):
        x = tf.constant(RNG.standard_normal((batch, 12)).astype(np.float32))
        np.testing.assert_allclose(sig(x=x)["y"].numpy(), original(x=x)["y"].numpy(), rtol=1e-5, atol=1e-6)
