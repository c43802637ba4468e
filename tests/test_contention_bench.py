"""The machinery of ``bench/contention_bench.py`` on a tiny row with a tiny time budget: every load
process is started, waited for and reaped (also on Ctrl-C), and the report has its ratio columns.
No timing is asserted: the figures are whatever this machine gives."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest
import tensorflow as tf

import bench.contention_bench as cb
from bench.models import ROWS, Case, Row

LOAD_ROW = "call overhead (x+1, scalar)"  # the cheapest row for the (b) process to compile


def tiny() -> Case:
    return Case(lambda x: x * 2.0 + 1.0, [tf.constant(np.arange(256, dtype=np.float32))])


TINY = Row("tiny x*2+1 [256]", tiny)


def children() -> list[int]:
    """This process's child processes, zombies included (an unreaped child is not gone)."""
    me, found = os.getpid(), []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as fh:
                    stat = fh.read()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == me:  # the field after the state is the ppid
                found.append(int(entry))
    return found


def gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("TFXLA_FLAGS", f"--cache_dir={tmp_path}")  # inherited by the (b) process


def test_three_conditions_reaped_and_reported(cache):
    assert children() == []
    lines: list[str] = []
    out = cb.run([TINY], seconds=0.03, rounds=1, load_row=LOAD_ROW, busy_procs=1, echo=lines.append)
    json.dumps(out)  # --json writes this record
    (row,) = out["rows"]
    assert row["check"] == "ok", row.get("traceback", row["check"])
    assert list(row["conditions"]) == ["quiet", "cpu_bound", "our_kernels"]
    for c in row["conditions"].values():
        assert {"tf_graph", "tf_xla", "ours", "ours/graph", "ours/xla"} <= set(c)
        assert c["ours/graph"] == pytest.approx(c["ours"] / c["tf_graph"])
        assert not c["load_died"]
    assert [len(c["load_pids"]) for c in row["conditions"].values()] == [0, 1, 1]
    assert row["conditions"]["cpu_bound"]["load_ready"] == ["ready"]
    (ready,) = row["conditions"]["our_kernels"]["load_ready"]
    assert ready.startswith(f"ready {LOAD_ROW}: 1 cluster(s)"), ready
    assert set(row["acceptance"]) == {"cpu_bound", "our_kernels"}
    for condition, a in row["acceptance"].items():
        quiet, loaded = row["conditions"]["quiet"], row["conditions"][condition]
        assert a["vs_quiet"] == pytest.approx(loaded["ours/graph"] / quiet["ours/graph"])
        assert a["slower_than_graph"] == (loaded["ours"] > loaded["tf_graph"])
        assert a["ok"] == (a["vs_quiet"] <= cb.ACCEPT)
    for pid in (p for c in row["conditions"].values() for p in c["load_pids"]):
        assert gone(pid), pid
    assert children() == []

    text = "\n".join(lines)
    assert "1-minute load average" in text
    assert "ours/graph" in text and "ours/XLA" in text
    assert text.count("its quiet value") == 2  # the acceptance line of (a) and of (b)
    assert "(a) 1 busy loop(s)" in text and f"(b) ours beside: {LOAD_ROW}" in text
    assert cb.SUMMARY_HEADER in text and "(a) vs quiet" in cb.SUMMARY_HEADER
    summary = text.split(cb.SUMMARY_HEADER, 1)[1].splitlines()[1]
    assert summary.startswith(TINY.name)
    assert summary.split()[-2:] == ["YES" if row["acceptance"][c]["slower_than_graph"] else "no"
                                    for c in ("cpu_bound", "our_kernels")]


def test_ctrl_c_while_measuring_kills_the_load(cache, monkeypatch):
    seen: list[list[int]] = []

    def interrupted(*_):
        seen.append(children())
        raise KeyboardInterrupt

    monkeypatch.setattr(cb, "measure", interrupted)
    with pytest.raises(KeyboardInterrupt):
        cb.run([TINY], conditions=("cpu_bound",), seconds=0.01, rounds=1, busy_procs=2, echo=lambda _: None)
    assert len(seen) == 1 and len(seen[0]) == 2  # both busy loops were running while measuring
    assert all(gone(pid) for pid in seen[0])
    assert children() == []


def test_a_load_process_that_dies_before_ready_is_reported_and_reaped():
    load = cb.Load("our_kernels", ["sys.stderr.write('no kernels here\\n'); sys.exit(3)"])
    with pytest.raises(RuntimeError, match=r"our_kernels load process \d+ exited with status 3:\nno kernels here"):
        with load:
            pass
    assert load.procs[0].returncode == 3
    assert children() == []


def test_row_selection():
    assert [r.name for r in cb.select_rows(None, None)] == list(cb.DEFAULT_ROWS)
    assert [r.name for r in cb.select_rows(["CNN", "softmax"], None)] == ["softmax [1024,1024]", "small CNN batch 32"]
    assert [r.name for r in cb.select_rows(None, "ResNet")] == ["ResNet50 224 batch 1"]
    assert [r.name for r in cb.select_rows(["MLP"], "batch 1")] == ["MLP 784-512-512-10 batch 1"]
    assert len(cb.select_rows(["all"], None)) == len(ROWS)
    with pytest.raises(SystemExit, match="no row named like"):
        cb.select_rows(["no such row"], None)
    assert cb.load_row_name("softmax") == "softmax [1024,1024]"
    with pytest.raises(SystemExit, match="names 2 rows"):
        cb.load_row_name("MobileNetV2")


@pytest.mark.parametrize("code, timeout_s, ready, error", [
    ("print('a stray line'); " + cb.BUSY, 60.0, ["ready"], None),
    ("import time; time.sleep(60)", 0.5, None, r"cpu_bound load process \d+ not ready after 0 s"),
])
def test_waiting_for_ready(code, timeout_s, ready, error):
    load = cb.Load("cpu_bound", [code], timeout_s=timeout_s)
    if error is None:
        with load:
            assert load.ready == ready and load.alive()
    else:
        with pytest.raises(RuntimeError, match=error):
            with load:
                pass
    assert load.procs[0].returncode is not None
    assert children() == []
