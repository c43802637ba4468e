"""bench.engines' adapters against TF, and bench.function_bench's engine columns, checks and tables.

The adapter tests run where the engines are installed (``pip install -e .[bench]``) and skip with the
reason elsewhere; the rest uses recorded rows and stand-in engines (``tests/engine_stubs.py`` in a child
process, as the benchmark runs every engine), so it runs everywhere.
"""

from __future__ import annotations

import gc
import os
import time

import numpy as np
import pytest
import tensorflow as tf

from bench import engines as eng
from bench import function_bench as fb
from bench.engine_process import EngineUnavailable, RemoteEngine, Sampler
from bench.models import ROWS, Case, build_case, layer_norm_fn


def _tiny_cases() -> dict[str, Case]:
    r = np.random.default_rng(1)
    return {
        "softmax": Case(lambda x: tf.nn.softmax(x), [tf.constant(r.standard_normal((8, 32)).astype(np.float32))]),
        # three inputs of two shapes: an adapter that binds them out of order fails here
        "layer norm": Case(layer_norm_fn, [tf.constant(r.standard_normal((4, 16)).astype(np.float32)),
                                           tf.constant(r.uniform(0.5, 2.0, 16).astype(np.float32)),
                                           tf.constant(r.standard_normal(16).astype(np.float32))]),
    }


@pytest.mark.parametrize("engine", eng.ENGINES, ids=lambda e: e.name)
@pytest.mark.parametrize("name", ["softmax", "layer norm"])
def test_engine_adapter_matches_tf(engine: eng.Engine, name: str):
    if not engine.available():
        pytest.skip(f"{engine.title} is not installed (needs {', '.join(engine.modules)}: pip install -e .[bench])")
    case = _tiny_cases()[name]
    graph = tf.function(case.fn)
    want = np.asarray(graph(*case.args))
    prepared = engine.prepare(case, graph)
    assert prepared.compile_s > 0
    call, outputs, shapes = prepared.call, prepared.outputs, [a.shape for a in case.args]
    del prepared, case  # the call alone must keep its bound inputs alive: were they freed, the NaNs
    gc.collect()  # written over their memory here would show in the result
    junk = [np.full(shape, np.nan, np.float32) for _ in range(64) for shape in shapes]
    call()
    del junk
    (got,) = outputs()
    assert got.shape == want.shape and got.dtype == np.float32
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


class _Stub:
    """A stand-in engine: ``prepare`` returns canned outputs or raises."""

    def __init__(self, outputs=None, error: Exception | None = None):
        self.outputs, self.error, self.prepared = outputs, error, 0

    def prepare(self, case, graph) -> eng.Prepared:
        self.prepared += 1
        if self.error is not None:
            raise self.error
        return eng.Prepared(lambda: None, lambda: self.outputs, 0.25)


def _engine(stub: _Stub, name: str = "stub") -> eng.Engine:
    return eng.Engine(name, "Stub", ("numpy",), stub.prepare)


class _Remote:
    """A stand-in ``RemoteEngine`` (converted; its outputs as given)."""

    def __init__(self, outputs):
        self.outputs, self.compile_s = outputs, 0.25


def test_add_engine_checks_against_tf_and_skips_training_rows():
    case = Case(lambda x: x * 2.0, [tf.constant([1.0, 2.0])])
    want = [np.array([2.0, 4.0], np.float32)]
    out: dict = {}
    samplers: dict = {}
    fb.add_engine(out, samplers, "stub", lambda: _Remote([np.array([2.0, 4.5], np.float32)]), case, want)
    assert "stub" in samplers and out["stub_compile_s"] == 0.25
    assert out["stub_check"] == "result 0: max |diff| 0.5 over tolerance"
    assert out["stub_max_abs"] == 0.5 and out["stub_max_rel"] == pytest.approx(0.125)

    started = []
    training = Case(case.fn, case.args, reset=lambda: None)
    out, samplers = {}, {}
    fb.add_engine(out, samplers, "stub", lambda: started.append(1), training, want)
    assert started == [] and samplers == {}
    assert out["stub_skip"].startswith("a training step: it writes variables")

    def refused():
        raise EngineUnavailable("failed: ValueError: no converter for op Foo")

    out, samplers = {}, {}
    fb.add_engine(out, samplers, "stub", refused, case, want)
    assert samplers == {} and out["stub_skip"] == "failed: ValueError: no converter for op Foo"


def _proc_stat(pid: int) -> tuple[str, int]:
    """(state letter, utime + stime in clock ticks) of process ``pid``, from /proc/<pid>/stat."""
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return fields[0], int(fields[11]) + int(fields[12])


class _Watched(Sampler):
    """Ours, recording what the engine's process did while each of our rounds was timed."""

    def __init__(self, pid: int):
        super().__init__(lambda: time.sleep(0.005))
        self.pid, self.states, self.ticks = pid, set(), []

    def sample(self, n: int) -> list[float]:
        before = _proc_stat(self.pid)[1]
        result = [self.states.add(_proc_stat(self.pid)[0]) or s for s in super().sample(n)]
        self.ticks.append(_proc_stat(self.pid)[1] - before)
        return result


def test_an_engine_runs_in_its_own_process_stopped_while_ours_is_timed(tmp_path):
    # the stand-in engine spins a thread forever, as the engines' pools did after their rounds
    remote = RemoteEngine("tests.engine_stubs:SPINNING", "tests.engine_stubs:TINY", tmp_path)
    try:
        assert remote.pid != os.getpid() and remote.compile_s == 0.25
        result, converted_in = remote.outputs
        np.testing.assert_array_equal(result, np.array([2.0, 4.0], np.float32))
        assert converted_in == remote.pid
        start = _proc_stat(remote.pid)[1]
        ours = _Watched(remote.pid)
        medians = fb.interleaved_medians({"ours": ours, "spinning": remote}, seconds=0.4, rounds=2)
        assert set(medians) == {"ours", "spinning"} and medians["ours"] >= 5.0
        assert ours.states == {"T"}  # stopped during every call of ours
        assert ours.ticks == [0, 0]  # and it used no CPU during our rounds,
        assert _proc_stat(remote.pid)[1] > start  # though it spins whenever it runs
    finally:
        remote.close()
    assert remote.proc.returncode is not None


@pytest.mark.parametrize("engine", eng.ENGINES, ids=lambda e: e.name)
def test_a_real_engine_out_of_process_matches_tf(engine: eng.Engine, tmp_path):
    if not engine.available():
        pytest.skip(f"{engine.title} is not installed (needs {', '.join(engine.modules)}: pip install -e .[bench])")
    row = next(r for r in ROWS if r.name.startswith("softmax"))
    case = build_case(row)
    want = [np.asarray(tf.function(case.fn)(*case.args))]
    out: dict = {}
    samplers: dict = {}
    fb.add_engine(out, samplers, engine.name, lambda: RemoteEngine(engine.name, row.name, tmp_path), case, want)
    try:
        assert out[f"{engine.name}_check"] == "ok", out
        assert out[f"{engine.name}_max_rel"] < 1e-5 and out[f"{engine.name}_compile_s"] > 0
        assert samplers[engine.name].sample(2)[0] > 0
    finally:
        samplers[engine.name].close()


def test_tables_with_missing_and_present_engines():
    ov, ort = eng.ENGINES
    row = {"workload": "softmax", "tf_graph": 1.2, "tf_xla": 1.5, "ours": 0.8, "check": "ok",
           "max_abs": 7.5e-9, "max_rel": 9.1e-8, "compile_cold_s": 1.0, "first_call_s": 0.5,
           "compile_warm_s": 0.05, "compile_new_process_s": 0.6, "xla_compile_s": 0.3}
    # no engine installed: no engine columns at all
    assert "ours/eng" not in fb.header(()) and "OpenVINO" not in fb.header(())
    plain = fb.format_row(row)
    assert plain.split()[1:7] == ["1.200", "1.500", "0.800", "1.50x", "1.50x", "1.88x"]
    assert plain.endswith("ours ok 7.5e-09/9.1e-08")
    # engines installed but not run on this row (skipped or failed): "-" and no ratio
    missing = fb.format_row(row, (ov, ort))
    assert missing.split()[1:10] == ["1.200", "1.500", "-", "-", "0.800", "1.50x", "1.50x", "1.88x", "-"]
    assert "OpenVINO" not in missing
    # one engine ran: ours / that engine, its check after ours
    row.update({"onnxruntime": 0.2, "onnxruntime_check": "ok", "onnxruntime_max_abs": 0.0,
                "onnxruntime_max_rel": 0.0, "onnxruntime_compile_s": 0.75})
    both = fb.format_row(row, (ov, ort))
    assert both.split()[1:10] == ["1.200", "1.500", "-", "0.200", "0.800", "1.50x", "1.50x", "1.88x", "4.00x"]
    assert both.endswith("ours ok 7.5e-09/9.1e-08; ONNX RT ok 0/0")
    assert len(fb.header((ov, ort)).split("check:")[0]) == len(both.split("ours ok")[0])

    assert fb.format_compile_row(row, (ov, ort)).split()[1:] == ["1.50", "0.05", "0.60", "0.30", "5.00x", "2.00x", "-", "0.75"]
    assert fb.format_compile_row({"workload": "x", "check": "FAILED"}, (ov,)).split()[1:] == ["-"] * 7

    notes = fb.footnotes([dict(row, openvino_skip="a training step", onnxruntime_skip="a training step",
                               cache_hit_new_process=False)], (ov, ort))
    assert notes == ["softmax: OpenVINO, ONNX RT -: a training step",
                     "softmax: the new-process warm compile missed the kernel cache"]


def test_max_errors_relative_to_the_largest_result():
    got = [np.array([1.0, -3.0], np.float32), np.array([1, 2], np.int32)]
    want = [np.array([1.5, -4.0], np.float32), np.array([1, 2], np.int32)]
    assert fb.max_errors(got, want) == (1.0, 0.25)
