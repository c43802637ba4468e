"""``tfxla serve``: a TensorFlow-Serving-compatible REST server for (wrapped) SavedModels.

Speaks TF Serving's REST API (``/v1/models/NAME``, ``/metadata``, ``:predict`` in row and
columnar format, ``{"error": ...}`` answers) on Starlette + uvicorn. A wrapped model is an
ordinary SavedModel whose signatures call ``TfxlaLaunch``; importing ``tfxla_plugin`` (which
this package does) registers that op before the model is loaded. With ``jit=True`` (``tfxla serve
--jit``) a plain SavedModel is compiled where it is served: the Grappler hook is turned on before it
loads (docs/serving.md, "--jit").

Modules: ``model`` loads the SavedModel and describes its signatures; ``codec`` turns JSON
requests into arrays and arrays into JSON answers; ``batching`` merges concurrent requests;
``app`` is the ASGI application (``make_app``); ``server`` runs it under uvicorn (``serve``)
with ``limits`` on every request head (header timeout, header count and size).
"""

from __future__ import annotations


def make_app(model_dir, model_name, **options):
    """The ASGI application serving ``model_dir`` as ``model_name``; see ``app.make_app``."""
    from tfxla_plugin.serving.app import make_app as _make_app

    return _make_app(model_dir, model_name, **options)


def serve(model_dir, model_name, **options) -> int:
    """Serve until SIGTERM/SIGINT; returns the exit status. See ``server.serve``."""
    from tfxla_plugin.serving.server import serve as _serve

    return _serve(model_dir, model_name, **options)


__all__ = ["make_app", "serve"]
