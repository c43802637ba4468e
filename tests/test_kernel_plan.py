"""Kernel plans (``tfxla_plugin/kernel_plan.py``): a cluster compiled again on a warm cache runs neither the
lowering nor the HLO pipeline nor codegen nor the C compiler, and gets the same kernel, HLO (lowered and
optimized) and fusion log; another constant, a changed generator miss; a plan changed on disk is refused.

Each compile goes through a new ``tfxla_plugin.function``, whose only state shared with the first is the
disk cache: what a new process on a warm cache does (the plan and the kernel are read from disk).
"""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

import tfxla_plugin
from backends import kernel_cache
from backends.cpu import codegen
from tfxla_plugin import kernel_plan

W = np.random.default_rng(1).standard_normal((32, 16)).astype(np.float32)


def _with(w):
    return lambda x: tf.nn.softmax(tf.nn.relu(tf.matmul(x, w) + 1.0))


_f = _with(W)


def _compile(x, f=_f):
    """(compiled graph, C compiler runs, codegen runs, result) of a new function of ``f``."""
    fn = tfxla_plugin.function(f, jit_compile=True)
    builds, runs = kernel_cache.builds(), codegen.runs()
    compiled = fn.compiled_graph(x)
    return compiled, kernel_cache.builds() - builds, codegen.runs() - runs, fn(x).numpy()


@pytest.fixture
def x(tmp_path, monkeypatch):
    monkeypatch.setenv("TFXLA_FLAGS", f"--cache_dir={tmp_path / 'cache'}")
    return tf.constant(np.random.default_rng(0).standard_normal((64, 32)).astype(np.float32))


def test_a_warm_cache_skips_lowering_the_pipeline_codegen_and_compiler(x, monkeypatch):
    from tfxla_plugin import cluster_compiler

    lowered = []
    real_lower = cluster_compiler.lower_graph
    monkeypatch.setattr(cluster_compiler, "lower_graph", lambda *a, **k: lowered.append(1) or real_lower(*a, **k))
    want = _f(x).numpy()
    first, builds, runs, got = _compile(x)
    assert (builds, runs, len(lowered)) == (1, 1, 1) and not first.clusters[0].plan_hit
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    again, builds, runs, got = _compile(x)
    assert len(lowered) == 1
    (a,), (b,) = first.clusters, again.clusters
    assert (builds, runs) == (0, 0) and b.plan_hit and b.cache_hit
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    # what the launch, explain and the dumps read comes back from the plan
    assert (b.kernel_path, b.kernel_hash, b.signature) == (a.kernel_path, a.kernel_hash, a.signature)
    assert b.c_source == a.c_source and b.buffer_assignment == a.buffer_assignment
    assert b.fusion_decisions == a.fusion_decisions and b.fusions == a.fusions and b.fusions
    assert b.optimized.to_text() == a.optimized.to_text() and b.hlo.to_text() == a.hlo.to_text()
    assert b.executable.module.name == a.executable.module.name


def test_another_constant_misses(x):
    _compile(x)
    w = W.copy()
    w[3, 5] = np.nextafter(w[3, 5], np.float32(np.inf))  # one ulp
    f = _with(w)
    again, builds, runs, got = _compile(x, f)
    assert (builds, runs) == (1, 1) and not again.clusters[0].plan_hit
    np.testing.assert_allclose(got, f(x).numpy(), rtol=1e-5, atol=1e-6)


def test_a_changed_generator_misses(x, monkeypatch):
    _compile(x)
    monkeypatch.setattr(kernel_plan, "generator_version", lambda: "another generator")
    again, builds, runs, _ = _compile(x)
    # generated again; the same C source is a hit of the kernel cache (its key is the source)
    assert (builds, runs) == (0, 1) and not again.clusters[0].plan_hit


def test_the_generator_version_hashes_every_source(tmp_path, monkeypatch):
    (tmp_path / "hlo" / "passes").mkdir(parents=True)
    source = tmp_path / "hlo" / "passes" / "p.py"
    source.write_text("x = 1\n")
    monkeypatch.setattr(kernel_plan, "_ROOT", tmp_path)
    monkeypatch.setattr(kernel_plan, "GENERATOR_SOURCES", ("hlo",))
    versions = []
    for text in ("x = 1\n", "x = 2\n"):
        source.write_text(text)
        kernel_plan.generator_version.cache_clear()
        versions.append(kernel_plan.generator_version())
    kernel_plan.generator_version.cache_clear()
    assert versions[0] != versions[1]


def test_a_plan_changed_on_disk_is_refused(x, tmp_path):
    _compile(x)
    (plan,) = (tmp_path / "cache").glob(f"*/*{kernel_plan.SUFFIX}")
    plan.write_bytes(plan.read_bytes().replace(b'"fused": true', b'"fused": false', 1))
    with pytest.raises(kernel_cache.UnsafeCacheError, match=r"\.plan has sha256 .* it changed after it was built"):
        _compile(x)
