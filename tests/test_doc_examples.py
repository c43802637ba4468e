"""Every ```python block of README.md and docs/*.md runs, except those ``SKIPPED`` names with a reason.

The blocks of one file run in order in one namespace (a later block continues an earlier one), with
``/tmp/`` paths moved under the test's temporary directory; ``CHECKS`` then asserts what a file's
example promises (numbers against TF, clusters built), so an example that runs but shows nothing fails.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Callable

import numpy as np
import pytest

REPO = Path(__file__).resolve().parent.parent
DOCS = ("README.md", *sorted(str(p.relative_to(REPO)) for p in (REPO / "docs").glob("*.md")))
_BLOCK = re.compile(r"^```python\n(.*?)^```", re.S | re.M)

SKIPPED: dict[tuple[str, int], str] = {  # (file, block index): why it does not run here
    ("README.md", 1): "loads the process-wide graph-optimizer plugin (tests/test_hook_*.py run it in child processes)",
    ("README.md", 3): "reads an HLO dump (TFXLA_FLAGS=--dump_to) the reader made first",
    ("docs/hook.md", 0): "loads the process-wide graph-optimizer plugin (tests/test_hook_*.py run it in child processes)",
    ("docs/tensorboard.md", 1): "loads the process-wide graph-optimizer plugin (tests/test_hook_keras.py runs it)",
    ("docs/cuda.md", 0): "needs nvcc and an NVIDIA GPU",
    ("docs/cuda.md", 1): "needs nvcc and an NVIDIA GPU",
    ("docs/saved_models.md", 0): "builds Keras models, mobilenet_v2 among them (minutes)",
    ("docs/serving.md", 0): "talks gRPC to a running tfxla serve (tests/test_grpc_serving.py does)",
    ("docs/serving.md", 1): "starts a server that blocks",
}


def _readme(ns: dict, tmp: Path) -> None:
    import tensorflow as tf

    expected = tf.nn.softmax(tf.matmul(ns["x"], ns["w"]) + 1.0).numpy()
    np.testing.assert_allclose(ns["y"].numpy(), expected, rtol=1e-5, atol=1e-6)


def _tensorboard(ns: dict, tmp: Path) -> None:
    compiled = ns["model"].compiled_graph(ns["x"], ns["w"])
    assert len(compiled.clusters) == 1, ns["model"].explain(ns["x"], ns["w"])
    assert [c["name"] for c in json.loads(ns["doc"])["clusters"]] == ["cluster_0"]
    assert {"original", "rewritten", "hlo"} <= {p.name for p in (tmp / "tb" / "model").iterdir()}  # hlo: per cluster


def _saved_models(ns: dict, tmp: Path) -> None:
    import tensorflow as tf

    x = tf.ones((5, 3))
    got = ns["loaded"].signatures["serving_default"](x=x)["y"].numpy()
    np.testing.assert_allclose(got, np.tanh(x.numpy() @ ns["m"].w.numpy()), rtol=1e-6, atol=1e-6)
    assert "TfxlaLaunch" in {op.type for op in ns["cf"].graph.get_operations()}


CHECKS: dict[str, Callable[[dict, Path], None]] = {"README.md": _readme, "docs/tensorboard.md": _tensorboard,
                                                   "docs/saved_models.md": _saved_models}


def _blocks(doc: str) -> list[str]:
    return _BLOCK.findall((REPO / doc).read_text())


def test_the_tables_name_real_blocks() -> None:
    for doc, index in SKIPPED:
        assert index < len(_blocks(doc)), (doc, index)
    for doc in CHECKS:
        assert doc in DOCS


@pytest.mark.parametrize("doc", [d for d in DOCS if _blocks(d)])
def test_the_examples_run(doc, tmp_path, monkeypatch) -> None:
    blocks = [(i, b) for i, b in enumerate(_blocks(doc)) if (doc, i) not in SKIPPED]
    if not blocks:
        pytest.skip("; ".join(f"block {i}: {SKIPPED[doc, i]}" for i in range(len(_blocks(doc)))))
    monkeypatch.chdir(tmp_path)
    ns: dict = {"__name__": "__doc_example__"}
    for index, block in blocks:
        code = compile(block.replace('"/tmp/', f'"{tmp_path}/'), f"{doc}[python block {index}]", "exec")
        exec(code, ns)  # noqa: S102  (our own documentation)
    if doc in CHECKS:
        CHECKS[doc](ns, tmp_path)
