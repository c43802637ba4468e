"""Every sample SavedModel, in both export styles, wraps with zero errors and serves any batch size.

The wrapped models are moved, then loaded in one fresh subprocess, which runs batch sizes 1, 3 and 8
through each; the outputs equal the original models' (tolerances below). Each wrapped signature is
one cluster of batch-tiled kernels (tiles 1 and 8), so no batch size compiles anything.
MobileNetV2 is built at 96x96 here to keep the suite's time in bounds (the demo and the benchmark
use 224x224; the graph is the same but for the spatial size).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import tensorflow as tf

import saved_models
import tfxla_plugin  # noqa: F401
from tfxla_plugin import saved_model

pytestmark = pytest.mark.slow
OPTIONS = {"mobilenet_v2": {"input_shape": (96, 96, 3)}}
BATCHES = (1, 3, 8)
TOL = {"mlp": 1e-5, "small_cnn": 1e-5, "text_classifier": 1e-5, "mobilenet_v2": 1e-4}


@pytest.fixture(scope="module")
def wrapped(tmp_path_factory, sample_models_cache):
    root = tmp_path_factory.mktemp("samples")
    out = {}
    for name in saved_models.MODELS:
        for style in ("saved_model", "export"):  # built once for the run (test_saved_models.py's too)
            src = saved_models.build(name, style, cache_dir=sample_models_cache, **OPTIONS.get(name, {}))
            dst = root / "wrapped" / f"{name}_{style}"
            report = saved_model.wrap(src, dst, progress=False)
            out[(name, style)] = (src, dst, report)
    return root, out


def test_every_sample_wraps_into_one_batch_tiled_cluster(wrapped) -> None:
    _, models = wrapped
    for (name, style), (_, dst, report) in models.items():
        # model.export() saves "serve" and "serving_default" (the same function twice)
        assert {s.name for s in report.signatures} == ({"serving_default"} if style == "saved_model"
                                                        else {"serve", "serving_default"})
        manifest = saved_model.read_manifest(dst)
        for sig in report.signatures:
            assert sig.clusters == 1 and not sig.notes, (name, style, sig)
            assert sig.batch_tiles == (1, 8) and sig.kernels == 2, (name, style, sig)
            left = manifest["signatures"][sig.name]["clustering"]["excluded"]
            assert all(e["op"] in ("Placeholder", "ReadVariableOp", "NoOp", "Identity", "Const") for e in left), left


def test_moved_wrapped_samples_match_originals_in_a_fresh_process(wrapped, tmp_path) -> None:
    root, models = wrapped
    moved = tmp_path / "moved"
    shutil.copytree(root / "wrapped", moved)
    plan = {}
    for (name, style), (src, dst, report) in models.items():
        key = f"{name}_{style}"
        plan[key] = {"dir": str(moved / key), "signature": "serving_default", "batches": {}}
        for n in BATCHES:
            inputs = saved_models.example_inputs(src, n, seed=n)
            files = {}
            for input_name, value in inputs.items():
                files[input_name] = str(tmp_path / f"{key}_{n}_{input_name}.npy")
                np.save(files[input_name], value)
            plan[key]["batches"][n] = files
    (tmp_path / "plan.json").write_text(json.dumps(plan))
    script = textwrap.dedent(f"""
        import json, numpy as np, tensorflow as tf, tfxla_plugin
        plan = json.load(open({str(tmp_path / "plan.json")!r}))
        for key, p in plan.items():
            sig = tf.saved_model.load(p["dir"]).signatures[p["signature"]]
            for n, files in p["batches"].items():
                out = sig(**{{k: tf.constant(np.load(f)) for k, f in files.items()}})
                for k, v in out.items():
                    np.save({str(tmp_path)!r} + f"/out_{{key}}_{{n}}_{{k}}.npy", v.numpy())
    """)
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert "rebuilt" not in proc.stderr  # the shipped kernels were used as they are
    for (name, style), (src, _, report) in models.items():
        key = f"{name}_{style}"
        original = tf.saved_model.load(str(src)).signatures["serving_default"]
        for n, files in plan[key]["batches"].items():
            want = original(**{k: tf.constant(np.load(f)) for k, f in files.items()})
            for k, v in want.items():
                got = np.load(tmp_path / f"out_{key}_{n}_{k}.npy")
                assert got.shape == tuple(v.shape), (key, n, k)
                np.testing.assert_allclose(got, v.numpy(), rtol=TOL[name], atol=TOL[name], err_msg=f"{key} batch {n}")
