"""``tfxla serve`` as TF Serving's drop-in: real gRPC (the official client stubs) and REST on 127.0.0.1.

One server process for the module, started from a TF Serving ``--model_config_file`` with three models
(each from its own base path): ``one`` (latest version, label ``stable``), ``two`` (``specific`` policy:
version 1 of the two on disk) and ``live`` (where a test adds a version while clients send requests),
with batching from a ``--batching_parameters_file``, Prometheus from a ``--monitoring_config_file``
and a 0.2 s file-system poll. Answers are compared with the SavedModel's signature called here
(float32 survives both encodings exactly).
"""

from __future__ import annotations

import shutil
import signal
import threading
import time
from pathlib import Path

import httpx
import numpy as np
import pytest

from tests.test_serving import build_models
from tests.test_serving_http import grpc_address, server, wait_stopped

grpc = pytest.importorskip("grpc")
pytest.importorskip("tensorflow_serving.apis.prediction_service_pb2_grpc")
pytest.importorskip("prometheus_client")
pytestmark = pytest.mark.slow
CONFIG = """
model_config_list {
  config {
    name: "one"
    base_path: "one"
    model_platform: "tensorflow"
    version_labels { key: "stable" value: 1 }
  }
  config {
    name: "two"
    base_path: "two"
    model_platform: "tensorflow"
    model_version_policy { specific { versions: 1 } }
  }
  config { name: "live" base_path: "live" model_platform: "tensorflow" }
}
"""
BATCHING = "max_batch_size { value: 8 }\nbatch_timeout_micros { value: 1000 }\nnum_batch_threads { value: 2 }\n"


@pytest.fixture(scope="module")
def models(tmp_path_factory) -> dict[str, Path]:
    return build_models(tmp_path_factory.mktemp("grpc_models"))


@pytest.fixture(scope="module")
def direct(models):
    import tensorflow as tf

    loaded = {k: tf.saved_model.load(str(p)).signatures for k, p in models.items()}
    return lambda model, signature="serving_default", **inputs: {
        k: v.numpy() for k, v in loaded[model][signature](**inputs).items()}


@pytest.fixture(scope="module")
def served(models, tmp_path_factory):
    """(REST URL, gRPC address, the base directory of 'live', the log path) of the module's server."""
    root = tmp_path_factory.mktemp("grpc_serving")
    for name, source, versions in (("one", "one", [1]), ("two", "two", [1, 2]), ("live", "one", [1])):
        for v in versions:
            shutil.copytree(models[source], root / name / str(v))
    (root / "models.config").write_text(CONFIG)
    (root / "batching.txt").write_text(BATCHING)
    (root / "monitoring.txt").write_text("prometheus_config { enable: true }\n")
    log_path = root / "serve.log"
    flags = ("--model_config_file", str(root / "models.config"), "--file_system_poll_wait_seconds", "0.2",
             "--enable_batching", "--batching_parameters_file", str(root / "batching.txt"),
             "--monitoring_config_file", str(root / "monitoring.txt"), "--num_workers", "2")
    with server(None, log_path, *flags) as (proc, url):
        yield url, grpc_address(log_path), root / "live", log_path
        proc.send_signal(signal.SIGTERM)
        wait_stopped(proc, log_path)


@pytest.fixture(scope="module")
def stubs(served):
    from tensorflow_serving.apis import model_service_pb2_grpc, prediction_service_pb2_grpc

    channel = grpc.insecure_channel(served[1])
    yield prediction_service_pb2_grpc.PredictionServiceStub(channel), model_service_pb2_grpc.ModelServiceStub(channel)
    channel.close()


def predict_request(model: str, signature: str = "", version: int | None = None, label: str = "", **inputs):
    import tensorflow as tf
    from tensorflow_serving.apis import predict_pb2

    request = predict_pb2.PredictRequest()
    request.model_spec.name, request.model_spec.signature_name = model, signature
    if version is not None:
        request.model_spec.version.value = version
    if label:
        request.model_spec.version_label = label  # version and version_label are a oneof
    for k, v in inputs.items():
        request.inputs[k].CopyFrom(tf.make_tensor_proto(v))
    return request


def rpc_error(call, request) -> tuple:
    with pytest.raises(grpc.RpcError) as info:
        call(request, timeout=30)
    return info.value.code(), info.value.details()


def test_predict_metadata_and_status_through_the_official_stubs(stubs, direct):
    import tensorflow as tf
    from tensorflow_serving.apis import get_model_metadata_pb2, get_model_status_pb2

    prediction, model_service = stubs
    x = np.random.default_rng(0).standard_normal((3, 4)).astype(np.float32)
    r = prediction.Predict(predict_request("one", x=x), timeout=30)  # signature_name "": the default
    assert (r.model_spec.name, r.model_spec.version.value, r.model_spec.signature_name) == ("one", 1, "serving_default")
    np.testing.assert_array_equal(tf.make_ndarray(r.outputs["y"]), direct("one", x=x)["y"])
    a, b = x[:2], np.array([[1, 2], [3, -4]], np.int32)
    r = prediction.Predict(predict_request("two", a=a, b=b), timeout=30)
    want = direct("two", a=a, b=b)
    assert set(r.outputs) == {"total", "scaled"}
    for k in want:
        np.testing.assert_array_equal(tf.make_ndarray(r.outputs[k]), want[k])
    request = predict_request("two", a=a, b=b, label="")
    request.output_filter.append("scaled")
    assert set(prediction.Predict(request, timeout=30).outputs) == {"scaled"}
    strings = np.array([b"ab", b"\xffz"], dtype=object)
    r = prediction.Predict(predict_request("one", "strings", label="stable", s=strings), timeout=30)
    assert tf.make_ndarray(r.outputs["upper_bytes"]).tolist() == [b"AB", b"\xffZ"]

    meta = get_model_metadata_pb2.GetModelMetadataRequest()
    meta.model_spec.name = "two"
    meta.metadata_field.append("signature_def")
    r = prediction.GetModelMetadata(meta, timeout=30)
    defs = get_model_metadata_pb2.SignatureDefMap()
    assert r.metadata["signature_def"].Unpack(defs) and r.model_spec.version.value == 1
    sig = defs.signature_def["serving_default"]
    assert sig.method_name == "tensorflow/serving/predict"
    assert sig.inputs["b"].dtype == tf.int32.as_datatype_enum and set(sig.outputs) == {"total", "scaled"}

    status = model_service.GetModelStatus(get_model_status_pb2.GetModelStatusRequest(model_spec={"name": "two"}),
                                          timeout=30)
    assert [(s.version, s.state, s.status.error_code) for s in status.model_version_status] == [
        (1, get_model_status_pb2.ModelVersionStatus.AVAILABLE, 0)]  # version 2 is on disk, not in the policy


@pytest.mark.parametrize("what, code, words", [
    ("unknown model", "NOT_FOUND", "Servable not found for request: Latest(nope)"),
    ("unknown version", "NOT_FOUND", "Specific(two, 2)"),
    ("unknown label", "NOT_FOUND", "Unrecognized servable version label: canary"),
    ("unknown signature", "INVALID_ARGUMENT", "unknown signature 'nope'"),
    ("wrong dtype", "INVALID_ARGUMENT", "input 'x': expected float32 values, got float64"),
    ("wrong shape", "INVALID_ARGUMENT", "input 'x': expected shape [None, 4], got [2, 3]"),
    ("missing input", "INVALID_ARGUMENT", "missing input 'b' of signature 'serving_default'"),
    ("unknown output", "INVALID_ARGUMENT", "output_filter: unknown output 'nope'"),
    ("no metadata field", "INVALID_ARGUMENT", "must specify at least one metadata_field"),
    ("classify", "UNIMPLEMENTED", "Classify is not supported"),
])
def test_grpc_errors_carry_tf_servings_codes(stubs, what, code, words):
    from tensorflow_serving.apis import classification_pb2, get_model_metadata_pb2

    prediction, _ = stubs
    x = np.ones((2, 4), np.float32)
    call, request = prediction.Predict, {
        "unknown model": lambda: predict_request("nope", x=x),
        "unknown version": lambda: predict_request("two", version=2, a=x, b=np.ones((2, 2), np.int32)),
        "unknown label": lambda: predict_request("one", label="canary", x=x),
        "unknown signature": lambda: predict_request("one", "nope", x=x),
        "wrong dtype": lambda: predict_request("one", x=x.astype(np.float64)),
        "wrong shape": lambda: predict_request("one", x=np.ones((2, 3), np.float32)),
        "missing input": lambda: predict_request("two", a=x),
        "unknown output": lambda: predict_request("one", x=x),
    }.get(what, lambda: None)()
    if what == "unknown output":
        request.output_filter.append("nope")
    if what == "no metadata field":
        call, request = prediction.GetModelMetadata, get_model_metadata_pb2.GetModelMetadataRequest()
        request.model_spec.name = "one"
    if what == "classify":
        call, request = prediction.Classify, classification_pb2.ClassificationRequest()
    got_code, details = rpc_error(call, request)
    assert got_code == getattr(grpc.StatusCode, code) and words in details, (got_code, details)


def test_rest_versions_labels_and_two_models(served, direct):
    url = served[0]
    x = np.arange(8, dtype=np.float32).reshape(2, 4)
    for path in ("one:predict", "one/versions/1:predict", "one/labels/stable:predict"):
        r = httpx.post(f"{url}/v1/models/{path}", json={"signature_name": "", "instances": x.tolist()}, timeout=30)
        assert r.status_code == 200, (path, r.text)
        np.testing.assert_array_equal(np.asarray(r.json()["predictions"], np.float32), direct("one", x=x)["y"])
    meta = httpx.get(f"{url}/v1/models/one/labels/stable/metadata").json()
    assert meta["model_spec"] == {"name": "one", "signature_name": "", "version": "1"}
    status = httpx.get(f"{url}/v1/models/two").json()
    assert status == {"model_version_status": [{"version": "1", "state": "AVAILABLE",
                                                "status": {"error_code": "OK", "error_message": ""}}]}
    r = httpx.get(f"{url}/v1/models/two/versions/2")
    assert r.status_code == 404 and r.json() == {"error": "Could not find version 2 of model two"}


def _client_loop(stub, stop: threading.Event, seen: list, failures: list) -> None:
    request = predict_request("live", x=np.ones((1, 4), np.float32))
    while not stop.is_set():
        try:
            seen.append(stub.Predict(request, timeout=30).model_spec.version.value)
        except grpc.RpcError as e:
            failures.append(f"{e.code()}: {e.details()}")


def _rest_loop(url: str, stop: threading.Event, seen: list, failures: list) -> None:
    with httpx.Client(timeout=30) as client:
        while not stop.is_set():
            r = client.post(f"{url}/v1/models/live:predict", json={"instances": [[1.0, 2.0, 3.0, 4.0]]})
            (seen if r.status_code == 200 else failures).append(r.status_code if r.status_code == 200 else r.text)


def test_a_new_version_is_served_while_clients_send_requests(served, stubs, models):
    url, _, live, _ = served
    stop, seen, rest_seen, failures = threading.Event(), [], [], []
    threads = [threading.Thread(target=_client_loop, args=(stubs[0], stop, seen, failures)),
               threading.Thread(target=_rest_loop, args=(url, stop, rest_seen, failures))]
    for t in threads:
        t.start()
    try:
        deadline = time.monotonic() + 30
        while len(seen) < 20 and time.monotonic() < deadline:
            time.sleep(0.05)
        shutil.copytree(models["one"], live / "tmp-2")  # written elsewhere, then moved in whole
        (live / "tmp-2").rename(live / "2")
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            status = httpx.get(f"{url}/v1/models/live").json()["model_version_status"]
            states = {s["version"]: s["state"] for s in status}
            if states == {"2": "AVAILABLE", "1": "END"} and seen.count(2) >= 20:
                break
            time.sleep(0.1)
        n = len(seen)
        while len(seen) < n + 5 and time.monotonic() < deadline:
            time.sleep(0.05)
    finally:
        stop.set()
        for t in threads:
            t.join(60)
    assert failures == [], failures[:5]
    assert states == {"2": "AVAILABLE", "1": "END"}, states
    first_two = seen.index(2)
    assert seen[:first_two] == [1] * first_two and set(seen[first_two:]) == {2}, seen  # never back to 1
    assert first_two >= 20 and len(rest_seen) > 0
    r = httpx.post(f"{url}/v1/models/live/versions/1:predict", json={"instances": [[1.0, 2.0, 3.0, 4.0]]})
    assert r.status_code == 404 and "Specific(live, 1)" in r.json()["error"]


def test_prometheus_metrics_parse_and_count_requests(served, stubs):
    from prometheus_client.parser import text_string_to_metric_families

    url = served[0]
    x = np.ones((1, 4), np.float32)
    for _ in range(3):
        stubs[0].Predict(predict_request("one", x=x), timeout=30)
        httpx.post(f"{url}/v1/models/one:predict", json={"instances": x.tolist()})
    rpc_error(stubs[0].Predict, predict_request("one", x=x.astype(np.float64)))
    r = httpx.get(f"{url}/monitoring/prometheus/metrics")
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/plain")
    families = {f.name: f for f in text_string_to_metric_families(r.text)}
    counts = {(s.labels["model_name"], s.labels["status"]): s.value
              for s in families[":tensorflow:serving:request_count"].samples if s.name.endswith("_total")}
    assert counts[("one", "OK")] >= 6 and counts[("one", "INVALID_ARGUMENT")] >= 1, counts
    latency = families[":tensorflow:serving:request_latency"]
    entries = {(s.labels["API"], s.labels["entrypoint"]) for s in latency.samples if s.name.endswith("_count")}
    assert {("predict", "GRPC"), ("predict", "REST")} <= entries, entries
    batches = [s for s in families[":tensorflow:serving:batch_size"].samples
               if s.name.endswith("_count") and s.labels["model_name"] == "one"]
    assert batches and batches[0].value >= 6, batches
