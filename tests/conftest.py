"""Shared pytest setup: quiet TensorFlow's C++ logging before any test imports it, and how the suite is
spread over pytest-xdist workers (tests/README.md): a test file runs whole on one worker, the files that
share an in-process cache run on the same one, the longest start first; ``run_tmp_path`` is a directory
shared by every worker of one run."""

import os
from pathlib import Path

import pytest

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

# Files run on one worker together because they share an in-process cache: tests/hlo_corpus/generate.py
# keeps the corpus's XLA-made HLO per process (about 30 s of TF tracing and XLA to make).
GROUPS = {name: "hlo corpus" for name in (
    "tests/test_cpu_backend_corpus.py", "tests/test_cpu_pipeline_corpus.py", "tests/test_hlo_corpus.py",
    "tests/test_hlo_corpus_generation.py", "tests/test_hlo_parser_fuzz.py", "tests/test_pass_algsimp.py",
    "tests/test_pass_fusion_corpus.py", "tests/test_verifier_corpus.py")}

# The files (or groups) that take longest, longest first (seconds on 2 loaded cores, an empty cache,
# one process): handed out first, so that no worker is left running one while the other has finished.
# The rest follow in file-name order. A stale entry only costs balance, never a test.
LONGEST_FIRST = (
    "hlo corpus",                            # ~200 s
    "tests/test_cuda_launcher.py",           # 174 s
    "tests/test_saved_model_samples.py",     # 152 s
    "tests/test_keras_layer_walk.py",        # 148 s
    "tests/test_fuzz.py",                    # 99 s
    "tests/test_cuda_emulated.py",           # 91 s
    "tests/test_function_models.py",         # 76 s
    "tests/test_saved_models.py",            # 74 s
    "tests/test_cuda_nvcc.py",               # 72 s
    "tests/test_lowering_random.py",         # 68 s
    "tests/test_cuda_tf.py",                 # 51 s
    "tests/test_hook_keras_models.py",       # 49 s
    "tests/test_hook_function.py",           # 42 s
    "tests/test_cli_show.py",                # 42 s
    "tests/test_codegen_nest_size.py",       # 41 s
    "tests/test_function_bench.py",          # 40 s
    "tests/test_launch_op_trust.py",         # 39 s
    "tests/test_saved_model_wrap.py",        # 39 s
)
_RANK = {unit: k for k, unit in enumerate(LONGEST_FIRST)}


def work_unit(nodeid: str) -> str:
    """What runs whole on one worker: a test's file, or the group that file belongs to."""
    path = nodeid.split("::", 1)[0]
    return GROUPS.get(path, path)


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    """``--dist loadfile`` (pytest.ini), with ``GROUPS`` as one unit each and the units in collection
    order, which ``pytest_collection_modifyitems`` makes longest first (not xdist's most tests first)."""
    if config.getvalue("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class Units(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return work_unit(nodeid)

    config.option.loadscopereorder = False
    return Units(config, log)


def pytest_collection_modifyitems(config, items):
    """In a worker, the ``LONGEST_FIRST`` units first (every worker sorts alike, as xdist requires);
    a file's tests keep their order. A run in one process keeps pytest's order."""
    if os.environ.get("PYTEST_XDIST_WORKER"):
        items.sort(key=lambda item: _RANK.get(work_unit(item.nodeid), len(_RANK)))


@pytest.fixture(scope="session")
def run_tmp_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """This run's base temporary directory, the same in every worker of the run (under xdist each
    worker's own base is ``<run's base>/popen-gwN``): what is built here (a kernel cache: its file locks
    make concurrent builds of one key run the compiler once) is built once for the whole run."""
    base = tmp_path_factory.getbasetemp()
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base


@pytest.fixture(scope="session")
def sample_models_cache(run_tmp_path: Path) -> Path:
    """The run's cache of the sample SavedModels (``saved_models.build(..., cache_dir=...)``, a file lock
    per model): a model that several test files build with the same options is built once."""
    path = run_tmp_path / "saved_models"
    path.mkdir(exist_ok=True)
    return path
