"""bench.compile_bench: its measurement of ours (compiler runs counted, result checked) and its table."""

from __future__ import annotations

from bench import compile_bench as cb
from bench.models import ROWS, build_case


def test_cold_compiles_and_warm_hits_the_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("TFXLA_FLAGS", f"--cache_dir={tmp_path}")
    case = build_case(next(r for r in ROWS if r.name == "small CNN batch 32"))
    r = cb.measure_ours(case)
    assert r["cc_runs"] >= 1 and r["clusters"] >= 1 and not r["cache_hit"]
    assert r["warm_cc_runs"] == 0 and r["max_rel"] < 1e-5
    assert r["s"] > r["warm_s"] > 0 and r["cpu_s"] > 0 and r["cc_cpu_s"] > 0
    again = cb.measure_ours(build_case(next(r for r in ROWS if r.name == "small CNN batch 32")), warm=False)
    assert again["cc_runs"] == 0 and again["cache_hit"] and "warm_s" not in again
    assert r["codegen_runs"] >= 1 and again["codegen_runs"] == 0  # the kernel plans hit


def test_table_rows():
    row = {"cold": {"s": 20.0, "cpu_s": 15.0, "cc_cpu_s": 4.0, "cc_runs": 3, "warm_s": 2.5, "max_rel": 2e-7},
           "new": {"s": 5.0, "cpu_s": 4.5, "cc_runs": 0, "codegen_runs": 0}, "xla": {"s": 10.0}}
    assert cb.format_row("DenseNet121", row).split() == [
        "DenseNet121", "20.00", "15.00", "4.00", "3", "2.50", "5.00", "4.50", "0", "0", "10.00", "2.00x", "0.50x",
        "max", "rel", "err", "2.0e-07", "vs", "TF"]
    assert len(cb.HEADER.split("check")[0]) == len(cb.format_row("DenseNet121", row).split("max rel")[0])
    failed = cb.format_row("NASNetMobile", {"cold": {"error": "exit 1: boom"}, "new": {}, "xla": {"s": 10.0}})
    assert failed.split()[1:12] == ["-"] * 9 + ["10.00", "-"] and failed.endswith("cold: exit 1: boom")


def test_xla_first_call_is_timed():
    case = build_case(next(r for r in ROWS if r.name.startswith("softmax")))
    assert cb.measure_xla(case)["s"] > 0
