"""``tfxla serve``: a TensorFlow-Serving-compatible REST and gRPC server for (wrapped) SavedModels.

Speaks TF Serving's REST API (``/v1/models/NAME[/versions/N|/labels/L]``, ``/metadata``, ``:predict``
in row and columnar format, ``{"error": ...}`` answers) on Starlette + uvicorn and its gRPC
``PredictionService`` / ``ModelService`` (``tensorflow-serving-api``'s protos, grpcio), for one
SavedModel, the numbered versions under a base path, or the models of a TF Serving config file,
picking up new versions while it runs. A wrapped model is an
ordinary SavedModel whose signatures call ``TfxlaLaunch``; importing ``tfxla_plugin`` (which
this package does) registers that op before the model is loaded. With ``jit=True`` (``tfxla serve
--jit``) a plain SavedModel is compiled where it is served: the Grappler hook is turned on before it
loads (docs/serving.md, "--jit").

Modules: ``config`` reads TF Serving's config files (models, batching, monitoring); ``model`` loads
a SavedModel and describes its signatures; ``manager`` loads and unloads the versions; ``codec``
turns JSON requests into arrays and arrays into JSON answers; ``batching`` merges concurrent
requests; ``core`` is what both APIs answer through; ``app`` is the REST ASGI application
(``make_app``), ``grpc_api`` the gRPC services, ``metrics`` the Prometheus ones; ``server`` runs them
(``serve``) with ``limits`` on every REST request head (header timeout, header count and size).
"""

from __future__ import annotations


def make_app(model_dir, model_name="default", **options):
    """The ASGI application serving ``model_dir`` as ``model_name``; see ``app.make_app``."""
    from tfxla_plugin.serving.app import make_app as _make_app

    return _make_app(model_dir, model_name, **options)


def serve(model_dir=None, model_name="default", **options) -> int:
    """Serve until SIGTERM/SIGINT; returns the exit status. See ``server.serve``."""
    from tfxla_plugin.serving.server import serve as _serve

    return _serve(model_dir, model_name, **options)


__all__ = ["make_app", "serve"]
