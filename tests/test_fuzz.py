"""The differential fuzzer in CI: fixed-seed random graphs, compiled with ``jit_compile=True`` and
``"auto"``, against TF eager (tests/fuzz/README.md). Every graph must be ok, a clear ``unsupported``,
or ``tf_differs`` (TF's own graph mode disagrees with eager and we match it); any mismatch, crash
or unclear error fails with the graphs' repros.
"""

from __future__ import annotations

import numpy as np
import pytest

from tests.fuzz import __main__ as fuzz
from tests.fuzz.check import compare
from tests.fuzz.generator import generate

SEED = 1
GRAPHS = 240  # ~2 min on 2 busy cores, in 2 worker processes (measured: tests/fuzz/README.md)


@pytest.mark.slow
def test_fuzz_graphs_match_tf_eager() -> None:
    results = fuzz.run(SEED, list(range(GRAPHS)), jobs=2, batch=GRAPHS // 2, timeout=300, cache_dir=None)
    assert sorted(results) == list(range(GRAPHS))
    failures = [r for r in results.values() if r["status"] in fuzz.FAILURES]
    counts = fuzz.counts(results)
    assert counts["ok"] >= GRAPHS * 0.9, counts  # the generator still makes graphs we compile and run
    report = "\n\n".join(f"{r['status']} index={r['index']}: {r['detail']}\n{generate(SEED, r['index']).repro()}"
                         for r in sorted(failures, key=lambda r: r["index"]))
    assert not failures, f"{len(failures)} fuzz graph(s) failed {dict(counts)}:\n{report}"


def test_generator_is_deterministic_and_its_repro_is_the_graph() -> None:
    """The same (seed, index) gives the same source and inputs; the repro defines the function run."""
    a, b = generate(7, 11), generate(7, 11)
    assert a.function_source() == b.function_source() and a.repro() == b.repro()
    assert a.function_source() in a.repro()
    assert generate(7, 12).function_source() != a.function_source()


def test_compare_flags_nan_masks_inf_signs_and_values_beyond_tolerance() -> None:
    nan, inf = np.nan, np.inf
    f32 = lambda *v: np.array(v, np.float32)  # noqa: E731
    assert compare(f32(nan, inf, 1.0), f32(nan, inf, 1.0 + 1e-7), 2e-6) is None
    assert compare(f32(nan, 1.0), f32(0.0, 1.0), 2e-6).startswith("NaN mask")
    assert compare(f32(inf), f32(-inf), 2e-6).startswith("inf")
    assert compare(f32(inf), f32(3e38), 2e-6).startswith("inf")
    assert compare(f32(1.0, 2.0), f32(1.0, 2.001), 2e-6).startswith("value")
    assert compare(np.array([3], np.int32), np.array([4], np.int32), 0.0).startswith("value")
    assert compare(f32(1.0), np.array([1.0]), 2e-6).startswith("dtype/shape")
