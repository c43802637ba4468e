"""Sample SavedModels, built on demand and deterministically into a cache directory (never committed).

    import saved_models
    path = saved_models.build("mlp")                           # tf.saved_model.save(model, path)
    path = saved_models.build("mlp", style="export")           # model.export(path) (Keras 3 ExportArchive)
    path = saved_models.build("mobilenet_v2", input_shape=(96, 96, 3))
    feeds = saved_models.example_inputs(path, batch=3)         # {input name: np.ndarray}

Models (``MODELS``): ``mlp``, ``small_cnn``, ``mobilenet_v2``, ``text_classifier`` (see
``recipes.py``). Each is saved with a ``None`` batch dimension in its ``serving_default``
signature (checked after saving). A cached model is reused while its stamp (``tfxla_recipe.json``
inside the SavedModel directory: model, style, options, the sha256 of ``recipes.py``, the TF and
Keras versions) matches; otherwise it is rebuilt. Builds go to a temporary directory that is
renamed into place, under a per-model file lock.

The cache is ``$XDG_CACHE_HOME/tfxla_plugin/saved_models`` (or ``~/.cache/...``) unless
``cache_dir`` is given. ``python -m saved_models`` and ``tfxla models`` build from the command line.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import shutil
import tempfile
from pathlib import Path

import numpy as np

from saved_models.recipes import RECIPES, Recipe

MODELS: tuple[str, ...] = tuple(RECIPES)
STYLES: tuple[str, ...] = ("saved_model", "export")
STAMP = "tfxla_recipe.json"
_RECIPES_FILE = Path(__file__).with_name("recipes.py")


def default_cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "tfxla_plugin" / "saved_models"


def recipe(name: str) -> Recipe:
    if name not in RECIPES:
        raise ValueError(f"unknown sample model {name!r}; models: {', '.join(MODELS)}")
    return RECIPES[name]


def make_model(name: str, **options):
    """The in-memory Keras model of ``name`` (the same weights ``build`` saves for these options)."""
    r = recipe(name)
    return r.make(**r.resolve(options))


def model_dir(name: str, style: str = "saved_model", *, cache_dir=None, **options) -> Path:
    """Where ``build`` puts this model: ``CACHE/<name>[-<option>=<value>...]/<style>``."""
    r = recipe(name)
    _check_style(style)
    resolved = r.resolve(options)
    changed = [f"{k}={_text(v)}" for k, v in resolved.items() if v != r.resolve({})[k]]
    folder = "-".join([name, *changed])
    return Path(cache_dir if cache_dir is not None else default_cache_dir()) / folder / style


def build(name: str, style: str = "saved_model", *, cache_dir=None, rebuild: bool = False, **options) -> Path:
    """Build (or reuse from the cache) sample model ``name`` saved in ``style``; returns its directory.

    ``style="saved_model"`` saves with ``tf.saved_model.save(model, dir)``, ``"export"`` with
    ``model.export(dir)``. ``options`` are the recipe's (``seed`` for all; ``input_shape`` for
    ``small_cnn`` and ``mobilenet_v2``; vocabulary and sizes for ``text_classifier``).
    """
    r = recipe(name)
    resolved = r.resolve(options)
    target = model_dir(name, style, cache_dir=cache_dir, **options)
    wanted = _stamp(name, style, resolved)
    target.parent.mkdir(parents=True, exist_ok=True)
    with _locked(target.with_name(target.name + ".lock")):
        if not rebuild and _matches(target, wanted):
            return target
        tmp = Path(tempfile.mkdtemp(prefix=f".{style}-", dir=target.parent))
        try:
            _save(r.make(**resolved), style, tmp)
            inputs = _check_none_batch(tmp, name, style)
            high = r.int_high(resolved) if r.int_high else None
            stamp = {**wanted, "int_inputs": {k: [0, high] for k, (dtype, _) in inputs.items()
                                              if high is not None and np.issubdtype(dtype, np.integer)}}
            (tmp / STAMP).write_text(json.dumps(stamp, indent=1, sort_keys=True) + "\n")
            if target.exists():
                shutil.rmtree(target)
            os.replace(tmp, target)
        finally:
            if tmp.exists():
                shutil.rmtree(tmp, ignore_errors=True)
    return target


def read_stamp(path) -> dict | None:
    """The stamp of a directory ``build`` wrote, or None (any other SavedModel)."""
    try:
        return json.loads((Path(path) / STAMP).read_text())
    except (OSError, ValueError):
        return None


def example_inputs(path_or_name, batch: int, seed: int = 0, signature: str = "serving_default",
                   tag_set: str = "serve") -> dict[str, np.ndarray]:
    """Seeded inputs for ``signature`` of a SavedModel directory (or of sample model ``name``, built
    with default options): one array per input name, with the signature's dtype and shape
    (``batch`` for a ``None`` first dimension). Floats are uniform in [-1, 1); integer inputs are
    token ids in ``[0, vocab_size)`` when the model's stamp records a vocabulary, else in [0, 2).
    """
    from tfxla_plugin.commands.show import read_signatures

    path = Path(path_or_name)
    if isinstance(path_or_name, str) and path_or_name in RECIPES and not path.exists():
        path = build(path_or_name)
    if batch <= 0:
        raise ValueError(f"batch must be positive, got {batch}")
    signatures = read_signatures(path, tag_set)
    if signature not in signatures:
        raise ValueError(f"{path}: no signature {signature!r}; signatures: {', '.join(signatures)}")
    ranges = (read_stamp(path) or {}).get("int_inputs", {})
    rng = np.random.default_rng(seed)
    feeds = {}
    for key, spec in signatures[signature].inputs.items():
        dims = [batch if i == 0 and d is None else d for i, d in enumerate(spec.shape)]
        if any(d is None for d in dims):
            raise ValueError(f"{path}: input {key!r} has unknown dimensions beyond the batch: {spec.shape}")
        dtype = np.dtype(spec.dtype)
        if np.issubdtype(dtype, np.integer):
            low, high = ranges.get(key, (0, 2))
            feeds[key] = rng.integers(low, high, dims).astype(dtype)
        elif np.issubdtype(dtype, np.floating):
            feeds[key] = rng.uniform(-1.0, 1.0, dims).astype(dtype)
        elif dtype == np.bool_:
            feeds[key] = rng.random(dims) < 0.5
        else:
            raise ValueError(f"{path}: input {key!r} has dtype {spec.dtype}, which example_inputs cannot make")
    return feeds


# --- helpers ----------------------------------------------------------------------------------

def _check_style(style: str) -> None:
    if style not in STYLES:
        raise ValueError(f"unknown style {style!r}; styles: {', '.join(STYLES)}")


def _text(value) -> str:
    return "x".join(map(str, value)) if isinstance(value, tuple) else str(value)


def _stamp(name: str, style: str, resolved: dict) -> dict:
    import keras
    import tensorflow as tf

    return {"model": name, "style": style, "options": {k: _text(v) for k, v in resolved.items()},
            "recipe_sha256": hashlib.sha256(_RECIPES_FILE.read_bytes()).hexdigest(),
            "tf_version": tf.__version__, "keras_version": keras.__version__}


def _matches(target: Path, wanted: dict) -> bool:
    stamp = read_stamp(target)
    if stamp is None or not (target / "saved_model.pb").is_file():
        return False
    return {k: stamp.get(k) for k in wanted} == wanted


def _save(model, style: str, path: Path) -> None:
    import tensorflow as tf

    if style == "saved_model":
        tf.saved_model.save(model, str(path))
    else:
        model.export(str(path), format="tf_saved_model", verbose=False)


def _check_none_batch(path: Path, name: str, style: str) -> dict:
    from tfxla_plugin.commands.show import read_signatures

    signature = read_signatures(path, "serve").get("serving_default")
    if signature is None:
        raise RuntimeError(f"{name} ({style}): the saved model has no serving_default signature")
    for key, spec in signature.inputs.items():
        if not spec.shape or spec.shape[0] is not None:
            raise RuntimeError(f"{name} ({style}): input {key!r} has shape {spec.shape}, expected a None batch "
                               f"dimension")
    return {k: (np.dtype(s.dtype), s.shape) for k, s in signature.inputs.items()}


@contextlib.contextmanager
def _locked(lock_path: Path):
    with open(lock_path, "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


__all__ = ["MODELS", "STYLES", "build", "default_cache_dir", "example_inputs", "make_model", "model_dir",
           "read_stamp", "recipe"]
