"""TFXLA_FLAGS parsing: typed values, clear errors for unknown flags and bad values."""

import pytest

from tfxla_plugin.flags import FlagError, Flags


def test_parses_typed_values() -> None:
    f = Flags.parse("--dump_to=/tmp/d --min_cluster_size=2 --clustering_fuel=7 --dump_passes --backend=cpu")
    assert (f.dump_to, f.min_cluster_size, f.clustering_fuel, f.dump_passes, f.backend) == ("/tmp/d", 2, 7, True, "cpu")
    assert Flags.parse("") == Flags()


def test_unknown_flag_lists_known_ones() -> None:
    with pytest.raises(FlagError, match=r"unknown flag --dump_too; known flags: --dump_to, --dump_passes"):
        Flags.parse("--dump_too=/x")


@pytest.mark.parametrize("text, message", [
    ("--min_cluster_size=two", "--min_cluster_size takes an integer, got 'two'"),
    ("--backend=tpu", "--backend must be cpu or cuda"),
    ("--dump_passes=maybe", "--dump_passes takes true or false"),
    ("dump_to=/x", "expected --name=value"),
    ("--cache_dir", "--cache_dir needs a value"),
])
def test_bad_values_are_clear_errors(text: str, message: str) -> None:
    with pytest.raises(FlagError, match=message.replace("(", r"\(").replace(")", r"\)")):
        Flags.parse(text)


def test_from_env_reads_tfxla_flags_only(monkeypatch) -> None:
    monkeypatch.setenv("TFXLA_FLAGS", "--min_cluster_size=9")
    monkeypatch.setenv("TF_XLA_FLAGS", "--not_ours")
    assert Flags.from_env().min_cluster_size == 9
