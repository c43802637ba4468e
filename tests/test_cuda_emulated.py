"""The CUDA backend's numbers, without a GPU: generated kernels run on the host and match the evaluator.

``backends.cuda.host_emulator`` compiles the generated CUDA as host C++ (threads per block, barriers
for ``__syncthreads`` and warp shuffles) and runs the real host program through ``Executable``.
Every strategy is covered by ``tests.gpu.cases.MODULES`` (row, split and column reductions, argmax,
tiled transposes and dots, float4 loops, while/conditional, sort, scatter, f16/bf16/f64/ints) and by
the fusion tests' modules; the whole XLA-dumped corpus, both stages, is the slow test. Tolerances:
``tests.gpu.cases.compare`` (f32 rtol 1e-4 / atol 1e-5: reductions are reassociated across threads
and the device libm is within 2 ulp; ints and pred exact).
"""

from __future__ import annotations

import concurrent.futures
import os

import numpy as np
import pytest

import hlo
from backends.cuda.host_emulator import CUDA_INCLUDE, host_executables
from backends.cuda.pipeline import optimize
from tests.gpu.cases import MODULES, compare, corpus, random_args
from tests.test_cuda_nvcc import fusion_test_modules

pytestmark = pytest.mark.skipif(not os.path.exists(os.path.join(CUDA_INCLUDE, "cuda_fp16.h")),
                                reason=f"no CUDA headers in {CUDA_INCLUDE} (set TFXLA_CUDA_INCLUDE)")


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    return str(tmp_path_factory.mktemp("cuda_emulated"))


@pytest.fixture(scope="module")
def cases(cache):
    texts = {**MODULES, **fusion_test_modules()}
    originals = {name: hlo.parse_module(t) for name, t in texts.items()}
    exes = host_executables([optimize(m) for m in originals.values()], cache)
    return {name: (originals[name], exe) for name, exe in zip(originals, exes)}


@pytest.mark.parametrize("name", [*MODULES, *fusion_test_modules()])
def test_module_matches_the_evaluator(name: str, cases) -> None:
    module, exe = cases[name]
    for seed in (0, 1):
        args = random_args(module, seed)
        problems = compare(exe(*args), hlo.evaluate(module, *args), name)
        assert not problems, "\n".join(problems)


def test_an_executable_is_reused_and_checks_its_inputs(cases) -> None:
    module, exe = cases["softmax"]
    x = np.random.default_rng(3).standard_normal((37, 1000)).astype(np.float32)
    first = exe(x)[0]
    device = exe.device
    np.testing.assert_array_equal(exe(x)[0], first)
    assert exe.device is device  # buffers allocated once
    np.testing.assert_allclose(first.sum(axis=1), np.ones(37), rtol=1e-5)
    with pytest.raises(TypeError, match="takes 1 input"):
        exe(x, x)
    with pytest.raises(TypeError, match="input 0: expected dtype f32"):
        exe(x.astype(np.float64))
    with pytest.raises(ValueError, match=r"input 0: expected rank 2 \[37, 1000\]"):
        exe(x.reshape(-1))
    with pytest.raises(ValueError, match=r"input 0: expected dims \[37, 1000\], got \[1000, 37\]"):
        exe(x.T.copy())


@pytest.mark.slow
def test_the_whole_corpus_matches_the_evaluator(cache) -> None:
    entries = corpus()
    assert len(entries) == 196
    originals = [hlo.parse_module(text) for _, _, text, _ in entries]
    modules = [optimize(m) if stage == "hlo" else m for m, (_, stage, _, _) in zip(originals, entries)]
    problems = []
    starts = range(0, len(modules), 25)
    with concurrent.futures.ThreadPoolExecutor(2) as pool:  # two host compilers at a time
        batches = [pool.submit(host_executables, modules[start:start + 25], cache) for start in starts]
        for start, batch in zip(starts, batches):
            for j, exe in enumerate(batch.result()):
                name, stage, _, args = entries[start + j]
                problems += compare(exe(*args), hlo.evaluate(originals[start + j], *args), f"{name}/{stage}")
    assert not problems, "\n".join(problems)
