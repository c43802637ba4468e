"""``tfxla_plugin.serving`` in process: every route and error of the TF-Serving REST API, batching.

Answers are compared with calling the loaded signature directly: float32 values survive the
JSON round trip exactly (float32 -> double -> shortest repr -> double -> float32), so the
comparisons are exact. Requests go through httpx's ASGI transport (no sockets);
``test_serving_http.py`` runs the real server in a subprocess.
"""

from __future__ import annotations

import asyncio
import base64
import json
import logging
from pathlib import Path

import httpx
import numpy as np
import pytest

from tfxla_plugin.serving import make_app
from tfxla_plugin.serving.model import ModelLoadError


def build_models(root: Path) -> dict[str, Path]:
    """Two tiny Keras SavedModels, built from a fixed seed.

    ``one``: signatures ``serving_default`` (x: float32[None, 4] -> y: float32[None, 3], a tanh
    Dense), ``scaled`` (z: float32[None, None] -> scaled = 2z + 1) and ``strings``
    (s: string[None] -> length: int32, upper_bytes: string). ``two``: ``serving_default`` with
    inputs a: float32[None, 4], b: int32[None, 2] and outputs total: float32[None, 3],
    scaled: float32[None, 4].
    """
    import tensorflow as tf

    tf.keras.utils.set_random_seed(0)
    x = tf.keras.Input(shape=(4,), name="x")
    one = tf.keras.Model(x, tf.keras.layers.Dense(3, activation="tanh")(x))

    @tf.function(input_signature=[tf.TensorSpec([None, 4], tf.float32, name="x")])
    def default(x):
        return {"y": one(x)}

    @tf.function(input_signature=[tf.TensorSpec([None, None], tf.float32, name="z")])
    def scaled(z):
        return {"scaled": z * 2.0 + 1.0}

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name="s")])
    def strings(s):
        return {"length": tf.strings.length(s), "upper_bytes": tf.strings.upper(s)}

    paths = {"one": root / "one", "two": root / "two"}
    tf.saved_model.save(one, str(paths["one"]),
                        signatures={"serving_default": default, "scaled": scaled, "strings": strings})

    a = tf.keras.Input(shape=(4,), name="a")
    b = tf.keras.Input(shape=(2,), name="b", dtype="int32")
    hidden = tf.keras.layers.Dense(3)(a)
    total = tf.keras.layers.Activation("linear", name="total")(
        hidden + tf.keras.ops.sum(tf.keras.ops.cast(b, "float32"), axis=1, keepdims=True))
    doubled = tf.keras.layers.Activation("linear", name="scaled")(a * 2.0)
    two = tf.keras.Model({"a": a, "b": b}, {"total": total, "scaled": doubled})

    @tf.function(input_signature=[tf.TensorSpec([None, 4], tf.float32, name="a"),
                                  tf.TensorSpec([None, 2], tf.int32, name="b")])
    def two_default(a, b):
        return two({"a": a, "b": b})

    tf.saved_model.save(two, str(paths["two"]), signatures={"serving_default": two_default})
    return paths


@pytest.fixture(scope="module")
def models(tmp_path_factory) -> dict[str, Path]:
    return build_models(tmp_path_factory.mktemp("serving_models"))


@pytest.fixture(scope="module")
def direct(models):
    """``direct(model, signature, **inputs)``: the loaded signature called directly, as NumPy."""
    import tensorflow as tf

    loaded = {k: tf.saved_model.load(str(p)) for k, p in models.items()}

    def call(model, signature="serving_default", **inputs):
        out = loaded[model].signatures[signature](**inputs)
        return {k: v.numpy() for k, v in out.items()}

    return call


@pytest.fixture(scope="module")
def one(models):
    return make_app(models["one"], "one")


@pytest.fixture(scope="module")
def two(models):
    return make_app(models["two"], "two")


def send(app, *requests: tuple) -> list[httpx.Response]:
    """Sends (method, path[, json body | raw bytes]) requests to ``app`` concurrently."""

    async def go():
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://testserver",
                                     timeout=30) as client:
            calls = []
            for method, path, *body in requests:
                kw = {}
                if body:
                    kw = {"content": body[0]} if isinstance(body[0], bytes) else {"json": body[0]}
                calls.append(client.request(method, path, **kw))
            return await asyncio.gather(*calls)

    return asyncio.run(go())


def post(app, path, body) -> httpx.Response:
    return send(app, ("POST", path, body))[0]


def rand(*shape, seed=0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


# ---- status and metadata ----------------------------------------------------------------------

STATUS = {"model_version_status": [{"version": "1", "state": "AVAILABLE",
                                    "status": {"error_code": "OK", "error_message": ""}}]}


@pytest.mark.parametrize("path", ["/v1/models/one", "/v1/models/one/versions/1"])
def test_status(one, path):
    r = send(one, ("GET", path))[0]
    assert r.status_code == 200 and r.headers["content-type"] == "application/json"
    assert r.json() == STATUS


@pytest.mark.parametrize("path", ["/v1/models/two/metadata", "/v1/models/two/versions/1/metadata"])
def test_metadata(two, path):
    r = send(two, ("GET", path))[0]
    assert r.status_code == 200
    body = r.json()
    assert body["model_spec"] == {"name": "two", "signature_name": "", "version": "1"}
    sig = body["metadata"]["signature_def"]["signature_def"]["serving_default"]
    assert sig["method_name"] == "tensorflow/serving/predict"
    assert sig["inputs"]["a"]["dtype"] == "DT_FLOAT" and sig["inputs"]["b"]["dtype"] == "DT_INT32"
    assert sig["inputs"]["a"]["tensor_shape"]["dim"] == [{"size": "-1"}, {"size": "4"}]
    assert set(sig["outputs"]) == {"total", "scaled"}
    assert sig["outputs"]["total"]["tensor_shape"]["dim"] == [{"size": "-1"}, {"size": "3"}]


def test_metadata_lists_every_signature(one):
    defs = send(one, ("GET", "/v1/models/one/metadata"))[0].json()["metadata"]["signature_def"]["signature_def"]
    assert {"serving_default", "scaled", "strings"} <= set(defs)
    assert defs["strings"]["inputs"]["s"]["dtype"] == "DT_STRING"


# ---- predict -----------------------------------------------------------------------------------

def test_row_format_one_input(one, direct):
    x = rand(5, 4)
    r = post(one, "/v1/models/one:predict", {"instances": x.tolist()})
    assert r.status_code == 200, r.text
    got = np.asarray(r.json()["predictions"], np.float32)
    np.testing.assert_array_equal(got, direct("one", x=x)["y"])


def test_row_format_one_input_as_objects(one, direct):
    x = rand(3, 4, seed=1)
    r = post(one, "/v1/models/one/versions/1:predict", {"instances": [{"x": row} for row in x.tolist()]})
    assert r.status_code == 200, r.text
    np.testing.assert_array_equal(np.asarray(r.json()["predictions"], np.float32), direct("one", x=x)["y"])


@pytest.mark.parametrize("named", [False, True])
def test_columnar_format_one_input(one, direct, named):
    x = rand(2, 4, seed=2)
    r = post(one, "/v1/models/one:predict", {"inputs": {"x": x.tolist()} if named else x.tolist()})
    assert r.status_code == 200, r.text
    assert set(r.json()) == {"outputs"}
    np.testing.assert_array_equal(np.asarray(r.json()["outputs"], np.float32), direct("one", x=x)["y"])


def test_row_format_two_inputs_two_outputs(two, direct):
    a, b = rand(3, 4, seed=3), np.array([[1, 2], [-3, 4], [0, 7]], np.int32)
    instances = [{"a": a[i].tolist(), "b": b[i].tolist()} for i in range(3)]
    r = post(two, "/v1/models/two:predict", {"instances": instances})
    assert r.status_code == 200, r.text
    preds = r.json()["predictions"]
    assert len(preds) == 3 and all(set(p) == {"total", "scaled"} for p in preds)
    want = direct("two", a=a, b=b)
    for name in ("total", "scaled"):
        np.testing.assert_array_equal(np.asarray([p[name] for p in preds], np.float32), want[name])


def test_columnar_format_two_inputs_two_outputs(two, direct):
    a, b = rand(2, 4, seed=4), np.array([[5, 6], [7, 8]], np.int32)
    r = post(two, "/v1/models/two:predict", {"inputs": {"a": a.tolist(), "b": b.tolist()}})
    assert r.status_code == 200, r.text
    out = r.json()["outputs"]
    want = direct("two", a=a, b=b)
    assert set(out) == {"total", "scaled"}
    for name in ("total", "scaled"):
        np.testing.assert_array_equal(np.asarray(out[name], np.float32), want[name])


def test_signature_name_selects_the_signature(one, direct):
    z = rand(2, 5, seed=5)
    r = post(one, "/v1/models/one:predict", {"signature_name": "scaled", "instances": z.tolist()})
    assert r.status_code == 200, r.text
    np.testing.assert_array_equal(np.asarray(r.json()["predictions"], np.float32),
                                  direct("one", "scaled", z=z)["scaled"])


def test_nan_and_infinity_round_trip(one):
    z = [[float("nan"), float("inf"), -float("inf"), 1.5]]
    body = json.dumps({"signature_name": "scaled", "inputs": z}).encode()  # NaN/Infinity tokens
    r = post(one, "/v1/models/one:predict", body)
    assert r.status_code == 200, r.text
    assert "NaN" in r.text and "Infinity" in r.text
    out = np.asarray(json.loads(r.text)["outputs"])
    assert np.isnan(out[0, 0]) and out[0, 1] == np.inf and out[0, 2] == -np.inf and out[0, 3] == 4.0


def test_strings_and_b64(one, direct):
    raw = [b"abc", b"\xff\x00bin", "h\u00e9".encode()]
    instances = ["abc", {"b64": base64.b64encode(raw[1]).decode()}, "h\u00e9"]
    r = post(one, "/v1/models/one:predict", {"signature_name": "strings", "instances": instances})
    assert r.status_code == 200, r.text
    want = direct("one", "strings", s=np.array(raw, dtype=object))
    preds = r.json()["predictions"]
    assert [p["length"] for p in preds] == want["length"].tolist() == [3, 5, 3]
    # outputs named *_bytes always come back base64-encoded
    assert [base64.b64decode(p["upper_bytes"]["b64"]) for p in preds] == want["upper_bytes"].tolist()


# ---- errors ------------------------------------------------------------------------------------

GOOD_ROW = [[1.0, 2.0, 3.0, 4.0]]
ERRORS = [
    # (app, path, body, status, words the message must contain)
    ("one", "/v1/models/nope:predict", {"instances": GOOD_ROW}, 404, ["Servable not found", "nope"]),
    ("one", "/v1/models/nope", None, 404, ["Servable not found", "nope"]),
    ("one", "/v1/models/one/versions/2:predict", {"instances": GOOD_ROW}, 404, ["Specific(one, 2)"]),
    ("one", "/v1/models/one/labels/stable", None, 404, ["stable"]),
    ("one", "/v1/models/one:explode", {"instances": GOOD_ROW}, 404, ["':explode'"]),
    ("one", "/v2/whatever", None, 404, ["/v2/whatever"]),
    ("one", "/v1/models/one:predict", b'{"instances": [1,', 400, ["malformed JSON"]),
    ("one", "/v1/models/one:predict", b"\xff\xfe", 400, ["malformed JSON"]),
    ("one", "/v1/models/one:predict", b"[" * 100000, 400, ["malformed JSON"]),
    ("one", "/v1/models/one:predict", [1, 2], 400, ["JSON object"]),
    ("one", "/v1/models/one:predict", {}, 400, ["exactly one of 'instances'", "'inputs'"]),
    ("one", "/v1/models/one:predict", {"instances": GOOD_ROW, "inputs": GOOD_ROW}, 400, ["exactly one"]),
    ("one", "/v1/models/one:predict", {"instance": GOOD_ROW}, 400, ["unknown key 'instance'"]),
    ("one", "/v1/models/one:predict", {"signature_name": "nope", "instances": GOOD_ROW}, 400,
     ["unknown signature 'nope'", "serving_default"]),
    ("one", "/v1/models/one:predict", {"signature_name": 3, "instances": GOOD_ROW}, 400, ["signature_name"]),
    ("one", "/v1/models/one:predict", {"instances": []}, 400, ["non-empty list"]),
    ("one", "/v1/models/one:predict", {"instances": 3.0}, 400, ["non-empty list"]),
    ("one", "/v1/models/one:predict", {"inputs": {"z": GOOD_ROW}}, 400, ["unknown input 'z'", "x"]),
    ("one", "/v1/models/one:predict", {"instances": [{"z": [1, 2, 3, 4]}]}, 400, ["unknown input 'z'"]),
    ("one", "/v1/models/one:predict", {"instances": [{"x": [1, 2, 3, 4]}, [1, 2, 3, 4]]}, 400, ["mixes"]),
    ("one", "/v1/models/one:predict", {"instances": [["a", "b", "c", "d"]]}, 400,
     ["input 'x'", "float32", "strings"]),
    ("one", "/v1/models/one:predict", {"instances": [[True, False, True, True]]}, 400, ["input 'x'", "float32"]),
    ("one", "/v1/models/one:predict", {"instances": [[1, 2, None, 4]]}, 400, ["input 'x'", "float32"]),
    ("one", "/v1/models/one:predict", {"instances": [1.0, 2.0, 3.0, 4.0]}, 400,
     ["input 'x'", "expected shape [None, 4]", "[4]"]),
    ("one", "/v1/models/one:predict", {"instances": [[1.0, 2.0, 3.0]]}, 400, ["input 'x'", "[None, 4]", "[1, 3]"]),
    ("one", "/v1/models/one:predict", {"inputs": [[[1.0, 2.0, 3.0, 4.0]]]}, 400, ["input 'x'", "[None, 4]"]),
    ("one", "/v1/models/one:predict", {"instances": [[1, 2, 3, 4], [1, 2]]}, 400, ["input 'x'", "ragged"]),
    ("one", "/v1/models/one:predict", {"inputs": None}, 400, ["input 'x'", "null"]),
    ("one", "/v1/models/one:predict", {"inputs": []}, 400, ["input 'x'", "[None, 4]", "[0]"]),
    ("one", "/v1/models/one:predict", {"signature_name": "strings", "instances": [{"b64": "!!"}]}, 400,
     ["input 's'", "base64"]),
    ("one", "/v1/models/one:predict", {"signature_name": "strings", "instances": [1]}, 400,
     ["input 's'", "strings"]),
    ("one", "/v1/models/one:classify", {"examples": []}, 501, ["':classify'", "':predict'"]),
    ("one", "/v1/models/one:regress", {"examples": []}, 501, ["':regress'"]),
    ("two", "/v1/models/two:predict", {"inputs": {"a": [[1, 2, 3, 4]]}}, 400, ["missing input 'b'"]),
    ("two", "/v1/models/two:predict", {"instances": [[1, 2, 3, 4]]}, 400, ["inputs a, b", "object naming"]),
    ("two", "/v1/models/two:predict", {"instances": [{"a": [1, 2, 3, 4], "b": [1.5, 2]}]}, 400,
     ["input 'b'", "int32"]),
    ("two", "/v1/models/two:predict", {"instances": [{"a": [1, 2, 3, 4], "b": [2 ** 40, 2]}]}, 400,
     ["input 'b'", "out of range", "int32"]),
    ("two", "/v1/models/two:predict", {"instances": [{"a": [1, 2, 3, 4]}]}, 400, ["instance 0", "missing input 'b'"]),
    # the model itself rejects batch sizes 2 and 3 (TF's InvalidArgumentError is the caller's fault: 400)
    ("two", "/v1/models/two:predict", {"inputs": {"a": [[1, 2, 3, 4]] * 2, "b": [[1, 2]] * 3}}, 400,
     ["model execution failed: InvalidArgumentError: Incompatible shapes"]),
]


@pytest.mark.parametrize("app_name,path,body,status,words", ERRORS,
                         ids=[f"{e[3]}-{i}" for i, e in enumerate(ERRORS)])
def test_errors(one, two, direct, app_name, path, body, status, words):
    app = {"one": one, "two": two}[app_name]
    r = send(app, ("GET", path) if body is None else ("POST", path, body))[0]
    assert r.status_code == status, r.text
    message = r.json()["error"]
    for word in words:
        assert word in message, message
    # the server keeps serving
    ok = post(one, "/v1/models/one:predict", {"instances": GOOD_ROW})
    np.testing.assert_array_equal(np.asarray(ok.json()["predictions"], np.float32),
                                  direct("one", x=np.asarray(GOOD_ROW, np.float32))["y"])


@pytest.mark.parametrize("method,path,word", [("GET", "/v1/models/one:predict", "POST"),
                                              ("POST", "/v1/models/one", "GET"),
                                              ("POST", "/v1/models/one/metadata", "GET"),
                                              ("PUT", "/v1/models/one", "Method Not Allowed")])
def test_wrong_method_is_405(one, method, path, word):
    r = send(one, (method, path, {}) if method != "GET" else (method, path))[0]
    assert r.status_code == 405 and word in r.json()["error"]


def test_oversized_request_is_413(models):
    app = make_app(models["one"], "one", max_request_bytes=1000)
    r = post(app, "/v1/models/one:predict", {"instances": [[1.0, 2.0, 3.0, 4.0]] * 200})
    assert r.status_code == 413 and "1000 bytes" in r.json()["error"]
    assert post(app, "/v1/models/one:predict", {"instances": GOOD_ROW}).status_code == 200


def test_model_failure_is_500(models, monkeypatch):
    app = make_app(models["one"], "one")
    model = app.state.tfxla.manager.live()[0].model
    real_run = model.run

    def failing(signature, inputs):
        if np.isnan(inputs["x"]).any():
            raise RuntimeError("kernel exploded")
        return real_run(signature, inputs)

    monkeypatch.setattr(model, "run", failing)
    r = post(app, "/v1/models/one:predict", b'{"instances": [[NaN, 1, 2, 3]]}')
    assert r.status_code == 500
    assert r.json()["error"] == "model execution failed: RuntimeError: kernel exploded"
    assert post(app, "/v1/models/one:predict", {"instances": GOOD_ROW}).status_code == 200
    stats = send(app, ("GET", "/v1/models/one/stats"))[0].json()
    assert stats["requests"] == 2 and stats["errors"] == 1


def test_request_timeout_is_504(models, monkeypatch):
    import threading

    app = make_app(models["one"], "one", request_timeout_s=0.2)
    release = threading.Event()
    monkeypatch.setattr(app.state.tfxla.manager.live()[0].model, "run", lambda s, i: release.wait(5))
    try:
        r = post(app, "/v1/models/one:predict", {"instances": GOOD_ROW})
    finally:
        release.set()
    assert r.status_code == 504 and "timed out after 0.2 s" in r.json()["error"]


def test_access_log_one_debug_line_per_request(one, caplog):
    with caplog.at_level(logging.DEBUG, logger="tfxla_plugin.serving"):
        send(one, ("GET", "/v1/models/one"), ("POST", "/v1/models/nope:predict", {}))
    lines = sorted(r.getMessage() for r in caplog.records if r.levelno == logging.DEBUG)
    assert len(lines) == 2
    assert lines[0].startswith("GET /v1/models/one 200 ") and lines[0].endswith(" ms")
    assert lines[1].startswith("POST /v1/models/nope:predict 404 ")


def test_bad_model_dir_and_options(tmp_path, models):
    with pytest.raises(ModelLoadError, match=str(tmp_path)):
        make_app(tmp_path, "m")
    with pytest.raises(ValueError, match="num_workers"):
        make_app(models["one"], "one", num_workers=0)
    with pytest.raises(ValueError, match="max_batch_size"):
        make_app(models["one"], "one", batching=True, max_batch_size=0)
    with pytest.raises(ValueError, match="model name"):
        make_app(models["one"], "a:b")


# ---- batching ----------------------------------------------------------------------------------

def test_batching_merges_and_matches_unbatched(models, direct):
    app = make_app(models["one"], "one", batching=True, max_batch_size=8, batch_timeout_micros=1_000_000)
    xs = [rand(1 + i % 3, 4, seed=10 + i) for i in range(12)]  # 24 rows: at least 3 calls of <= 8
    rs = send(app, *[("POST", "/v1/models/one:predict", {"instances": x.tolist()}) for x in xs])
    for x, r in zip(xs, rs):
        assert r.status_code == 200, r.text
        np.testing.assert_array_equal(np.asarray(r.json()["predictions"], np.float32), direct("one", x=x)["y"])
    stats = send(app, ("GET", "/v1/models/one/stats"))[0].json()["batching"]
    assert stats["merged_calls"] >= 1 and stats["merged_requests"] >= 2
    assert 2 <= stats["max_rows"] <= 8 and stats["calls"] < 12 and stats["fallbacks"] == 0


def test_batching_keeps_different_inner_dims_apart(models, direct):
    app = make_app(models["one"], "one", batching=True, max_batch_size=64, batch_timeout_micros=1_000_000)
    zs = [rand(2, 3, seed=1), rand(1, 5, seed=2), rand(3, 3, seed=3), rand(2, 5, seed=4)]
    rs = send(app, *[("POST", "/v1/models/one:predict", {"signature_name": "scaled", "inputs": z.tolist()})
                     for z in zs])
    for z, r in zip(zs, rs):
        assert r.status_code == 200, r.text
        np.testing.assert_array_equal(np.asarray(r.json()["outputs"], np.float32),
                                      direct("one", "scaled", z=z)["scaled"])
    stats = send(app, ("GET", "/v1/models/one/stats"))[0].json()["batching"]
    assert stats["calls"] == 2 and stats["merged_calls"] == 2 and stats["max_rows"] == 5  # (2+3), (1+2) rows


def test_batching_one_bad_request_does_not_fail_the_others(models, direct, monkeypatch):
    app = make_app(models["one"], "one", batching=True, max_batch_size=32, batch_timeout_micros=1_000_000)
    model = app.state.tfxla.manager.live()[0].model
    real_run = model.run

    def failing(signature, inputs):
        if np.isnan(inputs["x"]).any():
            raise RuntimeError("NaN input")
        return real_run(signature, inputs)

    monkeypatch.setattr(model, "run", failing)
    xs = [rand(2, 4, seed=20 + i) for i in range(4)]
    xs[2][1, 1] = np.nan
    rs = send(app, *[("POST", "/v1/models/one:predict", json.dumps({"instances": x.tolist()}).encode())
                     for x in xs])
    assert [r.status_code for r in rs] == [200, 200, 500, 200]
    assert "NaN input" in rs[2].json()["error"]
    for i in (0, 1, 3):
        np.testing.assert_array_equal(np.asarray(rs[i].json()["predictions"], np.float32),
                                      direct("one", x=xs[i])["y"])
    assert send(app, ("GET", "/v1/models/one/stats"))[0].json()["batching"]["fallbacks"] == 1


def test_batching_two_inputs_and_large_requests(models, direct):
    app = make_app(models["two"], "two", batching=True, max_batch_size=4, batch_timeout_micros=1_000_000)
    sizes = [1, 2, 6, 1]  # 6 > max_batch_size runs on its own
    reqs, wants = [], []
    for i, n in enumerate(sizes):
        a, b = rand(n, 4, seed=30 + i), np.arange(2 * n, dtype=np.int32).reshape(n, 2) - i
        reqs.append(("POST", "/v1/models/two:predict", {"inputs": {"a": a.tolist(), "b": b.tolist()}}))
        wants.append(direct("two", a=a, b=b))
    for r, want in zip(send(app, *reqs), wants):
        assert r.status_code == 200, r.text
        for name in ("total", "scaled"):
            np.testing.assert_array_equal(np.asarray(r.json()["outputs"][name], np.float32), want[name])
    stats = send(app, ("GET", "/v1/models/two/stats"))[0].json()["batching"]
    assert stats["max_rows"] == 6 and stats["merged_calls"] == 1 and stats["merged_requests"] == 3


# ---- a model whose signature runs TfxlaLaunch ---------------------------------------------------

@pytest.mark.slow
def test_serves_a_model_that_calls_tfxla_launch(tmp_path):
    import tensorflow as tf
    from tensorflow.core.protobuf import saved_model_pb2

    import tfxla_plugin

    w = np.random.default_rng(7).standard_normal((4, 3)).astype(np.float32)

    class Compiled(tf.Module):
        def __init__(self):
            self.w = tf.Variable(w)
            self.f = tfxla_plugin.function(lambda x: tf.nn.softmax(tf.matmul(x, self.w) + 1.0), jit_compile=True)

        # autograph=False: autograph would otherwise transpile the whole compiler (minutes)
        @tf.function(input_signature=[tf.TensorSpec([2, 4], tf.float32, name="x")], autograph=False)
        def serve(self, x):
            return {"probs": self.f(x)}

    module = Compiled()
    tf.saved_model.save(module, str(tmp_path / "jit"), signatures={"serving_default": module.serve})
    saved = saved_model_pb2.SavedModel.FromString((tmp_path / "jit" / "saved_model.pb").read_bytes())
    ops = {n.op for f in saved.meta_graphs[0].graph_def.library.function for n in f.node_def}
    assert "TfxlaLaunch" in ops

    app = make_app(tmp_path / "jit", "jit")
    x = rand(2, 4, seed=8)
    r = post(app, "/v1/models/jit:predict", {"instances": x.tolist()})
    assert r.status_code == 200, r.text
    want = tf.nn.softmax(tf.matmul(x, w) + 1.0).numpy()  # plain TensorFlow, no compiler
    np.testing.assert_allclose(np.asarray(r.json()["predictions"], np.float32), want, rtol=1e-6, atol=1e-6)
    r = post(app, "/v1/models/jit:predict", {"instances": x[:1].tolist()})
    assert r.status_code == 400 and "expected shape [2, 4], got [1, 4]" in r.json()["error"]


def test_inter_op_threads_default_to_tensorflows_for_every_model(tmp_path, models):
    from tfxla_plugin.serving.model import MANIFEST, inter_op_threads_for

    wrapped = tmp_path / "wrapped"
    (wrapped / "assets").mkdir(parents=True)
    (wrapped / "assets" / MANIFEST).write_text("{}")  # where tfxla wrap writes it
    assert inter_op_threads_for(wrapped, None) is None  # kernels share one pool: TF's default
    assert inter_op_threads_for(models["one"], None) is None
    assert inter_op_threads_for(models["one"], 3) == 3 and inter_op_threads_for(wrapped, 0) == 0
    with pytest.raises(ValueError, match="inter_op_threads must be >= 0"):
        inter_op_threads_for(wrapped, -1)
    with pytest.raises(ValueError, match="inter_op_threads must be >= 0"):
        make_app(models["one"], "one", inter_op_threads=-2)


def test_inter_op_threads_after_tf_started_is_a_warning_not_an_error(caplog):
    import tensorflow as tf

    from tfxla_plugin.serving.model import apply_inter_op_threads

    tf.constant(1.0) + 1.0  # the runtime is running in this process
    current = tf.config.threading.get_inter_op_parallelism_threads()
    with caplog.at_level(logging.WARNING, logger="tfxla.serve"):
        assert apply_inter_op_threads(current + 1) == current
        assert apply_inter_op_threads(None) == current
    assert "cannot set TensorFlow's inter-op threads" in caplog.text


@pytest.mark.parametrize("text, why", [("{not json", "Expecting property name"),
                                        ('{"kernels": 5}', "kernels must be an object"),
                                        ('{"kernels": {"k": {"so": "../../etc/passwd"}}}', "not a plain file name")])
def test_a_malformed_manifest_is_a_load_error_naming_the_file(tmp_path, text, why) -> None:
    from tfxla_plugin.serving.model import _read_manifest

    (tmp_path / "assets").mkdir()
    (tmp_path / "assets" / "tfxla_manifest.json").write_text(text)
    with pytest.raises(ModelLoadError, match="unreadable tfxla manifest") as info:
        _read_manifest(tmp_path)
    assert why in str(info.value) and "tfxla_manifest.json" in str(info.value)
