"""``tfxla serve`` as a real process on 127.0.0.1: concurrency, batching, errors over HTTP, SIGTERM.

Each test starts ``python -m tfxla_plugin.cli serve --port 0`` (the server picks a free port and
logs its URL), waits for it (bounded), talks HTTP to it from several client threads and stops
it with SIGINT or SIGTERM, which must end it with status 0 after in-flight requests were answered.
The first test's server runs as if the gRPC packages were not installed (REST only, and a warning
naming them); the others serve gRPC too where they are (tests/test_grpc_serving.py talks to it).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import numpy as np
import pytest

from tests.test_serving import build_models
from tfxla_plugin.serving import grpc_api

pytestmark = pytest.mark.slow
START_TIMEOUT_S = 120  # a loaded 2-core machine imports TensorFlow slowly
STOP_TIMEOUT_S = 30
WITHOUT_GRPC = """
import sys
sys.modules["tensorflow_serving"] = None  # as if tensorflow-serving-api were not installed
from tfxla_plugin.cli import main
sys.exit(main(sys.argv[1:]))
"""


@pytest.fixture(scope="module")
def models(tmp_path_factory) -> dict[str, Path]:
    return build_models(tmp_path_factory.mktemp("serving_http_models"))


@pytest.fixture(scope="module")
def expected(models):
    import tensorflow as tf

    fn = tf.saved_model.load(str(models["one"])).signatures["serving_default"]
    return lambda x: fn(x=x)["y"].numpy()


@contextlib.contextmanager
def server(model_dir: Path | None, log_path: Path, *flags: str, entry: tuple[str, ...] = ("-m", "tfxla_plugin.cli"),
           env: dict | None = None, grpc: bool | None = None):
    """Runs ``tfxla serve`` on free ports, yields (process, base URL) and kills it if the test did not stop it.

    ``model_dir``: served as model 'one' with ``--dir`` (None: ``flags`` name the models, one of them
    'one'); ``entry``: how Python starts the CLI; ``env``: extra environment variables; ``grpc``: gRPC
    too (None: where its packages are installed)."""
    models = ["--dir", str(model_dir), "--model_name", "one"] if model_dir is not None else []
    if grpc is None:
        grpc = grpc_api.missing() is None
    ports = ["--port", "auto"] if grpc else []
    cmd = [sys.executable, *entry, "serve", *models, "--host", "127.0.0.1", *ports, "--rest_api_port", "auto", *flags]
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", **(env or {}))
    with open(log_path, "w") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env,
                                cwd=Path(__file__).resolve().parents[1])
    try:
        yield proc, _wait_ready(proc, log_path)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)


def _wait_ready(proc: subprocess.Popen, log_path: Path) -> str:
    deadline = time.monotonic() + START_TIMEOUT_S
    url = None
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            pytest.fail(f"tfxla serve exited with {proc.returncode}:\n{log_path.read_text()}")
        if url is None:
            m = re.search(r"at (http://127\.0\.0\.1:\d+)/v1/models/one", log_path.read_text())
            url = m and m.group(1)
        if url is not None:
            with contextlib.suppress(httpx.TransportError):
                if httpx.get(f"{url}/v1/models/one", timeout=5).status_code == 200:
                    return url
        time.sleep(0.2)
    pytest.fail(f"tfxla serve not ready after {START_TIMEOUT_S} s:\n{log_path.read_text()}")


def grpc_address(log_path: Path) -> str:
    """The gRPC address a started server logged."""
    m = re.search(r"gRPC \(PredictionService, ModelService\) at (127\.0\.0\.1:\d+)", log_path.read_text())
    assert m, log_path.read_text()
    return m.group(1)


def wait_stopped(proc: subprocess.Popen, log_path: Path) -> None:
    try:
        assert proc.wait(STOP_TIMEOUT_S) == 0, log_path.read_text()
    except subprocess.TimeoutExpired:
        pytest.fail(f"tfxla serve still running {STOP_TIMEOUT_S} s after the signal:\n{log_path.read_text()}")
    assert "tfxla serve: stopped" in log_path.read_text()


def predict_many(url: str, xs: list[np.ndarray], threads: int = 8) -> list[httpx.Response]:
    """Posts every x from ``threads`` client threads that start together."""
    barrier = threading.Barrier(threads)
    local = threading.local()

    def client() -> httpx.Client:
        if not hasattr(local, "client"):
            local.client = httpx.Client(timeout=60)
            with contextlib.suppress(threading.BrokenBarrierError):
                barrier.wait(30)
        return local.client

    def one(x):
        return client().post(f"{url}/v1/models/one:predict", json={"instances": x.tolist()})

    with ThreadPoolExecutor(threads) as pool:
        return list(pool.map(one, xs))


def rows(n: int, seed: int) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.standard_normal((1 + i % 3, 4)).astype(np.float32) for i in range(n)]


def _check_head_limits(url: str, timeout_s: float, max_headers: int, x: np.ndarray, want: np.ndarray) -> None:
    """Clients stuck mid-head get 408 after ``timeout_s`` while another is served; too many headers get 431."""
    address = ("127.0.0.1", int(url.rsplit(":", 1)[1]))
    slow = [socket.create_connection(address, timeout=timeout_s + 10) for _ in range(10)]
    opened = time.monotonic()
    for s in slow:
        s.sendall(b"POST /v1/models/one:predict HTTP/1.1\r\nHost: x\r\nContent-")  # and nothing more
    r = httpx.post(f"{url}/v1/models/one:predict", json={"instances": x.tolist()})
    np.testing.assert_array_equal(np.asarray(r.json()["predictions"], np.float32), want)
    for s in slow:
        with s:
            answer = b"".join(iter(lambda: s.recv(65536), b""))  # until the server closes
        assert answer.startswith(b"HTTP/1.1 408 ") and b"request head not complete within 2 s" in answer, answer
    assert timeout_s - 0.1 <= time.monotonic() - opened <= timeout_s + 5
    headers = b"".join(b"X-%d: 1\r\n" % i for i in range(max_headers))
    with socket.create_connection(address, timeout=30) as s:
        s.sendall(b"GET /v1/models/one HTTP/1.1\r\nHost: x\r\n" + headers + b"\r\n")
        answer = b"".join(iter(lambda: s.recv(65536), b""))
    assert answer.startswith(b"HTTP/1.1 431 ") and b"more than 30 request headers" in answer, answer


def test_serve_concurrent_requests_errors_and_sigint(models, expected, tmp_path):
    log_path = tmp_path / "serve.log"
    flags = ("--num_workers", "2", "--max_request_bytes", "100000", "--header_timeout", "2", "--max_headers", "30")
    # REST as served without the gRPC packages (a warning says what to install), also what every test runs.
    with server(models["one"], log_path, *flags, entry=("-c", WITHOUT_GRPC), grpc=False) as (proc, url):
        assert "inter-op threads=TF default]" in log_path.read_text()  # not a wrapped model: TF's own
        assert "REST only, no gRPC on port 8500: gRPC serving needs grpcio and tensorflow-serving-api" \
            in log_path.read_text()
        assert httpx.get(f"{url}/v1/models/one/metadata").json()["model_spec"]["name"] == "one"
        xs = rows(200, seed=0)
        for x, r in zip(xs, predict_many(url, xs)):
            assert r.status_code == 200, r.text
            np.testing.assert_array_equal(np.asarray(r.json()["predictions"], np.float32), expected(x))
        bad = [(b'{"instances": [1,', 400, "malformed JSON"),
               (json.dumps({"inputs": {"nope": [[1, 2, 3, 4]]}}).encode(), 400, "unknown input 'nope'"),
               (json.dumps({"instances": [["a", "b", "c", "d"]]}).encode(), 400, "expected float32"),
               (json.dumps({"instances": [[[1.0, 2.0, 3.0, 4.0]]]}).encode(), 400, "expected shape"),
               (json.dumps({"instances": [[1.0, 2.0, 3.0, 4.0]] * 10000}).encode(), 413, "100000 bytes")]
        for body, status, words in bad:
            r = httpx.post(f"{url}/v1/models/one:predict", content=body, timeout=30)
            assert r.status_code == status and words in r.json()["error"], r.text
        r = httpx.post(f"{url}/v1/models/one:predict", json={"instances": xs[0].tolist()})
        np.testing.assert_array_equal(np.asarray(r.json()["predictions"], np.float32), expected(xs[0]))
        stats = httpx.get(f"{url}/v1/models/one/stats").json()
        assert stats["requests"] == 206 and stats["errors"] == 5 and stats["batching"] is None
        _check_head_limits(url, timeout_s=2.0, max_headers=30, x=xs[0], want=expected(xs[0]))
        proc.send_signal(signal.SIGINT)
        wait_stopped(proc, log_path)


def test_serve_batching_merges_and_finishes_in_flight_on_sigterm(models, expected, tmp_path):
    log_path = tmp_path / "serve_batching.log"
    flags = ("--batching", "--max_batch_size", "8", "--batch_timeout_micros", "1500000", "--inter_op_threads", "1")
    with server(models["one"], log_path, *flags) as (proc, url):
        assert "inter-op threads=1]" in log_path.read_text()  # set before TF started, in force
        xs = rows(16, seed=1)
        for x, r in zip(xs, predict_many(url, xs)):
            assert r.status_code == 200, r.text
            np.testing.assert_array_equal(np.asarray(r.json()["predictions"], np.float32), expected(x))
        stats = httpx.get(f"{url}/v1/models/one/stats").json()
        assert stats["batching"]["merged_calls"] >= 1 and stats["batching"]["max_rows"] <= 8, stats

        # A lone request waits in the batcher (1.5 s timeout) while SIGTERM arrives: it is answered.
        x = xs[0]
        with ThreadPoolExecutor(1) as pool:
            pending = pool.submit(httpx.post, f"{url}/v1/models/one:predict",
                                  json={"instances": x.tolist()}, timeout=60)
            deadline = time.monotonic() + 30
            while httpx.get(f"{url}/v1/models/one/stats").json()["requests"] < 17:
                assert time.monotonic() < deadline, "the request never reached the server"
                time.sleep(0.02)
            proc.send_signal(signal.SIGTERM)
            r = pending.result(60)
        assert r.status_code == 200, r.text
        np.testing.assert_array_equal(np.asarray(r.json()["predictions"], np.float32), expected(x))
        wait_stopped(proc, log_path)


def test_a_wrapped_model_is_served_at_tensorflows_default_threads(models, expected, tmp_path):
    from tfxla_plugin import saved_model

    wrapped = tmp_path / "wrapped_one"
    saved_model.wrap(models["one"], wrapped, signatures=["serving_default"], progress=False)
    log_path = tmp_path / "serve_wrapped.log"
    with server(wrapped, log_path) as (proc, url):
        assert ", wrapped)" in log_path.read_text() and "inter-op threads=TF default]" in log_path.read_text()
        x = rows(1, seed=2)[0]
        r = httpx.post(f"{url}/v1/models/one:predict", json={"instances": x.tolist()})
        assert r.status_code == 200, r.text
        np.testing.assert_allclose(np.asarray(r.json()["predictions"], np.float32), expected(x), rtol=1e-5, atol=1e-6)
        proc.send_signal(signal.SIGTERM)
        wait_stopped(proc, log_path)


def test_without_the_grpc_packages_port_says_what_to_install(models):
    """(Without ``--port``, REST is served: the first test runs such a server.)"""
    cmd = [sys.executable, "-c", WITHOUT_GRPC, "serve", "--dir", str(models["one"]), "--port", "8500"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120, cwd=Path(__file__).resolve().parents[1])
    assert proc.returncode == 1, proc.stderr
    assert "tfxla serve: --port 8500: gRPC serving needs grpcio and tensorflow-serving-api: pip install" in proc.stderr
    assert "tensorflow-serving-api==" in proc.stderr
