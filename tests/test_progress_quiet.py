"""``wrap``'s progress bar is drawn only when stderr is a terminal (logs and CI see no ``\\r`` lines)."""

from __future__ import annotations

import io

import pytest
import tensorflow as tf

from tfxla_plugin import saved_model


class _Tiny(tf.Module):
    @tf.function(input_signature=[tf.TensorSpec([None, 3], tf.float32)])
    def serve(self, x):
        return {"y": tf.tanh(x + 1.0) * 2.0 - 0.5}


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.mark.parametrize("stream, drawn", [(_Terminal, True), (io.StringIO, False)])
def test_the_bar_shows_only_on_a_terminal(tmp_path, monkeypatch, stream, drawn) -> None:
    module = _Tiny()
    tf.saved_model.save(module, str(tmp_path / "src"), signatures={"serving_default": module.serve})
    err = stream()
    monkeypatch.setattr("sys.stderr", err)
    saved_model.wrap(tmp_path / "src", tmp_path / "dst", progress=True)
    assert ("tfxla wrap: 100%" in err.getvalue()) is drawn, err.getvalue()
