"""The CUDA backend on a real GPU: every strategy's module and the corpus match the evaluator.

Skipped (with the reason) where PyCUDA or a GPU is missing, which is every CI machine;
``tests/gpu/run.sh`` runs these on a GPU machine (it installs PyCUDA from carried files). The same
modules run on the host in test_cuda_emulated.py, so CI still checks the numbers of every kernel.
"""

from __future__ import annotations

import os

import numpy as np
import pytest

import backends.cuda as cuda
from backends.cuda.pipeline import optimize
import hlo
from tests.gpu.cases import MODULES, compare, corpus, have_gpu, random_args

REASON = have_gpu()
pytestmark = pytest.mark.skipif(REASON is not None, reason=f"no GPU run: {REASON}")


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    """$TFXLA_CACHE_DIR when set (run.sh sets it, so kernels compiled by its earlier stage are hits)."""
    return os.environ.get("TFXLA_CACHE_DIR") or str(tmp_path_factory.mktemp("cuda_gpu"))


@pytest.mark.parametrize("name", list(MODULES))
def test_module_matches_the_evaluator_on_the_gpu(name: str, cache) -> None:
    module = hlo.parse_module(MODULES[name])
    exe = cuda.compile(optimize(module), cuda.CompileOptions(cache_dir=cache))
    for seed in (0, 1):
        args = random_args(module, seed)
        problems = compare(exe(*args), hlo.evaluate(module, *args), name)
        assert not problems, "\n".join(problems)


def test_the_corpus_matches_the_evaluator_on_the_gpu(cache) -> None:
    problems = []
    for name, stage, text, args in corpus():
        original = hlo.parse_module(text)
        exe = cuda.compile(optimize(original) if stage == "hlo" else original, cuda.CompileOptions(cache_dir=cache))
        problems += compare(exe(*args), hlo.evaluate(original, *args), f"{name}/{stage}")
    assert not problems, "\n".join(problems)


def test_buffers_are_allocated_once_and_gpuarrays_are_accepted(cache) -> None:
    import pycuda.gpuarray as gpuarray

    module = optimize(hlo.parse_module(MODULES["softmax"]))
    exe = cuda.compile(module, cuda.CompileOptions(cache_dir=cache))
    x = np.random.default_rng(0).standard_normal((37, 1000)).astype(np.float32)
    first = exe(x)[0]
    inputs = list(exe._in_ptrs)
    np.testing.assert_array_equal(exe(gpuarray.to_gpu(x))[0], first)
    assert exe._in_ptrs == inputs
    np.testing.assert_allclose(first.sum(axis=1), 1.0, rtol=1e-5)


def test_a_split_reduction_can_run_many_times(cache) -> None:
    """The last block resets its ticket: repeated launches keep giving the full sum."""
    module = hlo.parse_module(MODULES["full_reduce"])
    exe = cuda.compile(optimize(module), cuda.CompileOptions(cache_dir=cache))
    args = random_args(module, 5)
    want = hlo.evaluate(module, *args)
    for _ in range(5):
        assert not compare(exe(*args), want, "full_reduce")
