"""TF Serving's configuration files as ``tfxla serve`` reads them (``serving.config``), and what they change.

- ``--model_config_file``: models, version policies and labels parsed with tensorflow-serving-api's
  protos; every bad file is a ``ConfigError`` naming the file and the line or the config at fault;
- ``--batching_parameters_file`` and ``--monitoring_config_file``: TF Serving's field names;
- version policies select versions as TF Serving's do; ``ModelManager`` switches versions in
  process (the new one AVAILABLE before the old one goes, which stays UNLOADING until its running
  requests are done; a version that fails to load leaves the old one serving; a base path without
  versions is served once one appears), with a fake loader;
- batching with ``allowed_batch_sizes`` (calls padded, answers unchanged) and ``max_enqueued_batches``
  (503 when full), through the in-process app.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from tfxla_plugin.serving import config as cfg
from tfxla_plugin.serving.codec import RequestError
from tfxla_plugin.serving.manager import ModelManager

pytest.importorskip("tensorflow_serving.config.model_server_config_pb2")


def write(path: Path, text: str) -> Path:
    path.write_text(textwrap.dedent(text).lstrip())
    return path


def test_a_model_config_file_with_policies_and_labels(tmp_path):
    for d in ("a", "b", "c"):
        (tmp_path / d).mkdir()
    f = write(tmp_path / "models.config", """
        model_config_list {
          config { name: "a" base_path: "a" model_platform: "tensorflow" }
          config {
            name: 'b'
            base_path: "%s"
            model_version_policy { specific { versions: 3 versions: 1 } }
            version_labels { key: "stable" value: 1 }
            version_labels { key: "canary" value: 3 }
          }
          config { name: "c" base_path: "c" model_version_policy { all {} } }
        }
        """ % (tmp_path / "b"))
    a, b, c = cfg.parse_model_config_file(f)
    assert (a.name, a.base_path, a.policy) == ("a", tmp_path / "a", cfg.VersionPolicy("latest", 1))
    assert b.policy == cfg.VersionPolicy("specific", versions=(1, 3)) and b.labels == {"stable": 1, "canary": 3}
    assert c.policy.kind == "all" and not a.single_dir


@pytest.mark.parametrize("text, words", [
    ("model_config_list {\n  config {\n    name: \"a\"\n    bogus: 1\n  }\n}\n",
     ["line 4", 'no field named "bogus"']),
    ("model_config_list { config { name: \"a\" base_path: \"a\" }\n", ["line 1", "Expected \"}\""]),
    ("model_config_list { config { base_path: \"a\" } }", ["config 1", "no name"]),
    ("model_config_list { config { name: \"a\" } }", ["config 1 ('a')", "no base_path"]),
    ("model_config_list { config { name: \"a\" base_path: \"nowhere\" } }", ["base_path nowhere", "not a directory"]),
    ("model_config_list { config { name: \"a\" base_path: \"a\" model_platform: \"pytorch\" } }",
     ["model_platform 'pytorch'"]),
    ("model_config_list { config { name: \"a\" base_path: \"a\" } config { name: \"a\" base_path: \"a\" } }",
     ["config 2 ('a')", "given twice"]),
    ("model_config_list { config { name: \"a/b\" base_path: \"a\" } }", ["invalid model name", "'a/b'"]),
    ("model_config_list { config { name: \"a\" base_path: \"a\" model_version_policy { specific {} } } }",
     ["names no versions"]),
    ("model_config_list { config { name: \"a\" base_path: \"a\" version_labels { key: \"x\" value: 0 } } }",
     ["version label 'x'"]),
    ("", ["no model_config_list"]),
])
def test_bad_model_config_files_name_the_problem(tmp_path, text, words):
    (tmp_path / "a").mkdir()
    f = write(tmp_path / "bad.config", text)
    with pytest.raises(cfg.ConfigError) as info:
        cfg.parse_model_config_file(f)
    message = str(info.value)
    assert f"--model_config_file {f}" in message and all(w in message for w in words), message


def test_batching_and_monitoring_files(tmp_path):
    f = write(tmp_path / "batching.txt", """
        max_batch_size { value: 8 }
        batch_timeout_micros { value: 500 }
        max_enqueued_batches { value: 3 }
        num_batch_threads { value: 2 }
        allowed_batch_sizes: 2
        allowed_batch_sizes: 4
        allowed_batch_sizes: 8
        """)
    assert cfg.parse_batching_parameters(f) == {"max_batch_size": 8, "batch_timeout_micros": 500,
                                                "max_enqueued_batches": 3, "num_batch_threads": 2,
                                                "allowed_batch_sizes": (2, 4, 8)}
    bad = write(tmp_path / "bad_batching.txt", "max_batch_size { value: 8 }\nallowed_batch_sizes: 4\n")
    with pytest.raises(cfg.ConfigError, match=r"last of allowed_batch_sizes \(4\) must equal max_batch_size \(8\)"):
        cfg.parse_batching_parameters(bad)
    typo = write(tmp_path / "typo.txt", "max_batch_size { value: 8 }\nmax_batch_sise { value: 8 }\n")
    with pytest.raises(cfg.ConfigError, match=r"typo.txt, line 2: .*no field named \"max_batch_sise\""):
        cfg.parse_batching_parameters(typo)
    on = write(tmp_path / "monitoring.txt", "prometheus_config { enable: true }\n")
    assert cfg.parse_monitoring_config(on) == "/monitoring/prometheus/metrics"
    path = write(tmp_path / "path.txt", "prometheus_config { enable: true path: \"/metrics\" }\n")
    assert cfg.parse_monitoring_config(path) == "/metrics"
    assert cfg.parse_monitoring_config(write(tmp_path / "off.txt", "prometheus_config { }\n")) is None
    with pytest.raises(cfg.ConfigError, match="cannot read it"):
        cfg.parse_monitoring_config(tmp_path / "missing.txt")


def test_version_policies_select_as_tf_serving():
    on_disk = {1, 2, 5, 7}
    assert cfg.VersionPolicy().select(on_disk) == {7}
    assert cfg.VersionPolicy("latest", num_versions=2).select(on_disk) == {5, 7}
    assert cfg.VersionPolicy("all").select(on_disk) == on_disk
    assert cfg.VersionPolicy("specific", versions=(2, 3)).select(on_disk) == {2}


def test_the_manager_keeps_the_old_version_until_the_new_one_is_available(tmp_path):
    base = tmp_path / "m"
    (base / "1").mkdir(parents=True)
    (base / "1" / "saved_model.pb").write_bytes(b"")
    loads = []

    def loader(path: Path, version: int):
        loads.append(version)
        if (path / "broken").exists():
            raise RuntimeError(f"cannot load {path}")
        return f"model {version}"

    manager = ModelManager([cfg.ModelConfig("m", base)], loader, poll_wait_s=0)
    manager.load_initial()
    states = lambda: [(s.version, s.state, s.error_code) for s in manager.statuses("m")]  # noqa: E731
    assert states() == [(1, "AVAILABLE", "OK")]
    (base / "3").mkdir()  # not a SavedModel (yet): skipped, version 1 still served
    manager.poll()
    assert states() == [(1, "AVAILABLE", "OK")]
    with manager.acquire("m") as held:  # a request running on version 1 during the switch
        (base / "3" / "saved_model.pb").write_bytes(b"")
        (base / "3" / "broken").write_bytes(b"")
        manager.poll()  # version 3 fails: version 1 keeps serving
        assert states() == [(3, "END", "UNKNOWN"), (1, "AVAILABLE", "OK")]
        assert "cannot load" in manager.statuses("m", 3)[0].error_message
        (base / "2").mkdir()
        (base / "2" / "saved_model.pb").write_bytes(b"")
    assert held.model == "model 1"
    manager.poll()  # versions 1, 2, 3 on disk; 3 failed (not retried), so the newest is 3: nothing loads
    assert loads == [1, 3]
    shutil.rmtree(base / "3")
    manager.poll()  # newest is 2 now: loaded, then 1 unloaded
    assert states() == [(3, "END", "UNKNOWN"), (2, "AVAILABLE", "OK"), (1, "END", "OK")] and loads == [1, 3, 2]
    with manager.acquire("m") as s:
        assert s.version == 2
    with pytest.raises(RequestError, match=r"Specific\(m, 1\)"):
        with manager.acquire("m", 1):
            pass
    with pytest.raises(RequestError, match="Could not find version 9 of model m"):
        manager.statuses("m", 9)


def test_a_base_path_without_versions_is_served_once_one_appears(tmp_path):
    base = tmp_path / "m"
    (base / "notes").mkdir(parents=True)  # not a number: never a version
    manager = ModelManager([cfg.ModelConfig("m", base, cfg.VersionPolicy("latest", num_versions=2))],
                           lambda path, version: path.name, poll_wait_s=0)
    manager.load_initial()  # no versions yet: a warning, not an error
    with pytest.raises(RequestError, match="Could not find any versions of model m"):
        manager.statuses("m")
    with pytest.raises(RequestError, match=r"Servable not found for request: Latest\(m\)"):
        with manager.acquire("m"):
            pass
    for v in ("4", "10", "7"):
        (base / v).mkdir()
        (base / v / "saved_model.pb").write_bytes(b"")
    manager.poll()  # latest 2: versions 10 and 7; requests without a version go to 10
    assert [(s.version, s.state) for s in manager.statuses("m")] == [(10, "AVAILABLE"), (7, "AVAILABLE")]
    with manager.acquire("m") as newest, manager.acquire("m", 7) as seven:
        assert (newest.model, seven.model) == ("10", "7")
    with pytest.raises(RequestError, match="Servable not found for request: Latest\\(nope\\)"):
        manager.statuses("nope")


def test_an_unloading_version_finishes_its_running_requests_first(tmp_path):
    base = tmp_path / "m"
    for v in ("1", "2"):
        (base / v).mkdir(parents=True)
        (base / v / "saved_model.pb").write_bytes(b"")
    shutil.move(base / "2", tmp_path / "2")
    manager = ModelManager([cfg.ModelConfig("m", base)], lambda path, version: version, poll_wait_s=0)
    manager.load_initial()
    states = lambda: [(s.version, s.state) for s in manager.statuses("m")]  # noqa: E731
    with manager.acquire("m") as running:  # a request on version 1 while version 2 arrives
        shutil.move(tmp_path / "2", base / "2")
        poll = threading.Thread(target=manager.poll)
        poll.start()
        deadline = time.monotonic() + 10
        while states() != [(2, "AVAILABLE"), (1, "UNLOADING")] and time.monotonic() < deadline:
            time.sleep(0.01)
        assert states() == [(2, "AVAILABLE"), (1, "UNLOADING")]
        with manager.acquire("m") as later:  # new requests go to version 2 already
            assert later.version == 2
        assert running.version == 1 and poll.is_alive()  # the unload waits for the running request
    poll.join(10)
    assert states() == [(2, "AVAILABLE"), (1, "END")]


def test_allowed_batch_sizes_pad_calls_and_a_full_queue_is_503(tmp_path):
    from tests.test_serving import build_models, send

    from tfxla_plugin.serving import make_app

    models = build_models(tmp_path)
    app = make_app(models["one"], "one", batching=True, max_batch_size=8, batch_timeout_micros=200_000,
                   allowed_batch_sizes=(4, 8))
    model = app.state.tfxla.manager.live()[0].model
    seen = []
    real_run = model.run

    def run(signature, inputs):
        seen.append(inputs["x"].shape[0])
        return real_run(signature, inputs)

    model.run = run
    xs = [np.full((1 + i, 4), i, np.float32) for i in range(3)]  # 6 rows: one call padded to 8
    rs = send(app, *[("POST", "/v1/models/one:predict", {"instances": x.tolist()}) for x in xs])
    for x, r in zip(xs, rs):
        assert r.status_code == 200, r.text
        np.testing.assert_array_equal(np.asarray(r.json()["predictions"], np.float32), real_run("serving_default",
                                                                                              {"x": x})["y"])
    stats = send(app, ("GET", "/v1/models/one/stats"))[0].json()["batching"]
    assert seen == [8] and stats["padded_rows"] == 2, (seen, stats)

    full = make_app(models["one"], "one", batching=True, max_batch_size=8, batch_timeout_micros=200_000,
                    max_enqueued_batches=1)
    rs = send(full, ("POST", "/v1/models/one:predict", {"instances": [[1, 2, 3, 4]]}),
              ("POST", "/v1/models/one:predict", {"signature_name": "scaled", "instances": [[1.0]]}))
    assert [r.status_code for r in rs] == [200, 503], [r.text for r in rs]
    assert "queue is full" in rs[1].json()["error"] and "max_enqueued_batches" in rs[1].json()["error"]


def test_cli_refuses_a_bad_config_file_naming_it(tmp_path):
    f = write(tmp_path / "models.config", "model_config_list {\n  config {\n    nam: \"a\"\n  }\n}\n")
    proc = subprocess.run([sys.executable, "-m", "tfxla_plugin.cli", "serve", "--model_config_file", str(f),
                           "--port", "auto", "--rest_api_port", "auto"],
                          capture_output=True, text=True, timeout=120, cwd=Path(__file__).resolve().parents[1])
    assert proc.returncode == 1, proc.stderr
    assert f"tfxla serve: --model_config_file {f}, line 3:" in proc.stderr and '"nam"' in proc.stderr, proc.stderr
    both = subprocess.run([sys.executable, "-m", "tfxla_plugin.cli", "serve", "--dir", str(tmp_path),
                           "--model_config_file", str(f)], capture_output=True, text=True, timeout=120,
                          cwd=Path(__file__).resolve().parents[1])
    assert both.returncode == 1 and "exactly one of --dir, --model_base_path and --model_config_file" in both.stderr
