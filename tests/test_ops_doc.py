"""docs/ops.md is generated from the lowering registry and must not go stale."""

from __future__ import annotations

import tensorflow  # noqa: F401  (input names in the doc come from TensorFlow's op registry)

from hlo.lowering import NEVER_COMPILED, supported_ops  # noqa: E402
from hlo.lowering.docs import COMMAND, DOC_PATH, main, render  # noqa: E402


def test_ops_doc_is_up_to_date() -> None:
    assert DOC_PATH.exists(), f"{DOC_PATH} is missing; generate it with `{COMMAND}`"
    assert DOC_PATH.read_text() == render(), (
        f"{DOC_PATH} is stale (the lowering registry changed); regenerate it with `{COMMAND}`")


def test_ops_doc_lists_every_op_and_never_compiled_op() -> None:
    text = render()
    for op in list(supported_ops()) + list(NEVER_COMPILED):
        assert f"| `{op}` |" in text, op
    assert "| `Reshape` |" in text and "1 (`shape`)" in text.split("| `Reshape` |")[1].split("\n")[0]


def test_check_mode_reports_staleness(tmp_path, capsys) -> None:
    out = tmp_path / "ops.md"
    assert main(["--check", "--output", str(out)]) == 1
    assert COMMAND in capsys.readouterr().err
    assert main(["--output", str(out)]) == 0
    assert main(["--check", "--output", str(out)]) == 0


def test_tf2xla_column_comes_from_tfs_kernel_registry() -> None:
    """The column is TF's XLA_CPU_JIT registrations: ops tf2xla is known to lower say yes, others no."""
    from hlo.lowering.docs import tf2xla_cpu_ops

    xla = tf2xla_cpu_ops()
    assert {"MatMul", "SpaceToBatchND", "ResizeBilinear", "ResourceScatterAdd", "RFFT"} <= xla
    assert not {"ResizeBicubic", "ImageProjectiveTransformV3", "PrintV2", "_Arg"} & xla
    text = render()
    row = lambda op: text.split(f"| `{op}` |")[1].split("\n")[0]  # noqa: E731
    assert row("MatMul").endswith("| yes |") and row("ResizeNearestNeighborGrad").endswith("| no |")
    lacking = text.split("## tf2xla CPU ops we do not lower")[1]
    assert "`Svd`" in lacking and "`MatMul`" not in lacking
    assert "| `ResourceScatterAdd` | `graph_passes/forward_variables.py` |" in lacking
