"""``tfxla run``: run a SavedModel signature on inputs from files or NumPy expressions, like
``saved_model_cli run``.

    tfxla run --dir D [--tag_set serve] [--signature_def serving_default]
              (--inputs 'x=in.npy;y=in.npz[key]' | --input_exprs 'x=np.ones((2, 784))' |
               --input_examples 'x=[{"f": [1.0, 2.0]}]') [--outdir DIR] [--overwrite]

Items are separated by ``;`` (as in ``saved_model_cli``) or by a ``,`` followed by the next
``name=``. ``--inputs`` reads ``.npy``/``.npz`` files with ``numpy.load`` (no pickles);
``--input_exprs`` evaluates each expression with ``np`` as the only name (no builtins) and
overrides ``--inputs`` for the same key; ``--input_examples`` feeds a string input serialized
``tf.train.Example``s built from literal feature dicts (as ``saved_model_cli`` does). Inputs are checked against the signature before running:
every input given and known, dtypes convertible without changing kind (``float64`` to
``float32`` is fine, ``float`` to ``int32`` is not; integers must fit), shapes compatible. The
model is loaded with ``tf.saved_model.load`` after ``import tfxla_plugin`` (so wrapped models
load). Each output is printed as ``saved_model_cli run`` prints it (``Result for output key K:`` and
the array) and, with ``--outdir``, also saved as ``OUTDIR/<key>.npy``.
Every user error is one line on stderr and exit status 1.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
from pathlib import Path

from tfxla_plugin.commands.show import (SavedModelError, SignatureInfo, TensorInfo, _first_line, check_dir,
                                        read_signatures)

_NEXT_ITEM = re.compile(r"\s*[A-Za-z_][\w./:-]*\s*=(?!=)")  # "name=" (not "name==") starts the next item
_FILE_ITEM = re.compile(r"([^=\[\]]+)=([^\[\]]+?)(?:\[([^\[\]]+)\])?$")


def split_items(text: str) -> list[str]:
    """Split at ``;`` and at ``,`` followed by ``name=``, outside brackets and quotes."""
    items, depth, quote, start = [], 0, None, 0
    for i, ch in enumerate(text):
        if quote:
            quote = None if ch == quote else quote
        elif ch in "'\"":
            quote = ch
        elif ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
        elif depth == 0 and (ch == ";" or (ch == "," and _NEXT_ITEM.match(text, i + 1))):
            items.append(text[start:i])
            start = i + 1
    items.append(text[start:])
    return [item.strip() for item in items if item.strip()]


def parse_inputs(text: str) -> dict:
    """``--inputs``: key -> array loaded from ``file.npy`` or ``file.npz[name]``."""
    import numpy as np

    feeds = {}
    for item in split_items(text):
        match = _FILE_ITEM.match(item)
        if not match:
            raise SavedModelError(f"--inputs {item!r}: expected <input_key>=<filename> or "
                                  f"<input_key>=<filename>[<array_name>]")
        key, filename, name = match.group(1).strip(), match.group(2).strip(), match.group(3)
        if not os.path.isfile(filename):
            raise SavedModelError(f"--inputs {key}: no such file {filename}")
        try:
            data = np.load(filename, allow_pickle=False)
        except ValueError as e:
            raise SavedModelError(f"--inputs {key}: cannot read {filename} as .npy or .npz (pickles are not "
                                  f"loaded): {e}") from None
        except OSError as e:
            raise SavedModelError(f"--inputs {key}: cannot read {filename}: {e}") from None
        if isinstance(data, np.lib.npyio.NpzFile):
            with data:
                if name is None and len(data.files) != 1:
                    raise SavedModelError(f"--inputs {key}: {filename} holds {len(data.files)} arrays "
                                          f"({', '.join(data.files)}); name one as {filename}[NAME]")
                name = name if name is not None else data.files[0]
                if name not in data.files:
                    raise SavedModelError(f"--inputs {key}: {filename} has no array {name!r}; arrays: "
                                          f"{', '.join(data.files)}")
                feeds[key] = data[name]
        else:
            if name is not None:
                raise SavedModelError(f"--inputs {key}: {filename} is a .npy file holding one array; "
                                      f"[{name}] applies to .npz files only")
            feeds[key] = data
    return feeds


def parse_input_exprs(text: str) -> dict:
    """``--input_exprs``: key -> array of a Python expression evaluated with only ``np`` in scope."""
    import numpy as np

    feeds = {}
    for item in split_items(text):
        key, sep, expr = item.partition("=")
        if not sep or not key.strip() or not expr.strip():
            raise SavedModelError(f"--input_exprs {item!r}: expected <input_key>=<expression>")
        key = key.strip()
        try:
            value = eval(compile(expr.strip(), f"<--input_exprs {key}>", "eval"),  # noqa: S307 (the user's own CLI)
                         {"__builtins__": {}, "np": np})
            feeds[key] = np.asarray(value)
        except Exception as e:  # noqa: BLE001  (any error in the user's expression is reported in one line)
            raise SavedModelError(f"--input_exprs {key}: cannot evaluate {expr.strip()!r}: "
                                  f"{type(e).__name__}: {e}") from None
    return feeds


def _example(key: str, features) -> bytes:
    """One serialized ``tf.train.Example`` of ``{feature: [values]}`` (as ``saved_model_cli`` builds it:
    the first value's type picks float_list, bytes_list or int64_list)."""
    from tensorflow.core.example import example_pb2

    if not isinstance(features, dict):
        raise SavedModelError(f"--input_examples {key}: each example must be a dict of feature lists, not "
                              f"{type(features).__name__}")
    example = example_pb2.Example()
    for name, values in features.items():
        if not isinstance(values, list) or not values:
            raise SavedModelError(f"--input_examples {key}: feature {name!r} must be a non-empty list")
        feature = example.features.feature[name]
        first = values[0]
        try:
            if isinstance(first, float):
                feature.float_list.value.extend(values)
            elif isinstance(first, (str, bytes)):
                feature.bytes_list.value.extend(v.encode("utf8") if isinstance(v, str) else v for v in values)
            elif isinstance(first, int) and not isinstance(first, bool):
                feature.int64_list.value.extend(values)
            else:
                raise TypeError(f"type {type(first).__name__} is not a tf.train.Feature type")
        except (TypeError, ValueError, AttributeError) as e:
            raise SavedModelError(f"--input_examples {key}: feature {name!r}: {e}") from None
    return example.SerializeToString()


def parse_input_examples(text: str) -> dict:
    """``--input_examples``: key -> string array of serialized ``tf.train.Example``s, from a Python
    literal list of ``{feature: [values]}`` dicts (read with ``ast.literal_eval``: no code runs)."""
    import ast

    import numpy as np

    feeds = {}
    for item in split_items(text):
        key, sep, literal = item.partition("=")
        if not sep or not key.strip() or not literal.strip():
            raise SavedModelError(f"--input_examples {item!r}: expected <input_key>=[{{feature: [values]}}, ...]")
        key = key.strip()
        try:
            examples = ast.literal_eval(literal.strip())
        except (ValueError, SyntaxError) as e:
            raise SavedModelError(f"--input_examples {key}: not a Python literal: {_first_line(e)}") from None
        if not isinstance(examples, list):
            raise SavedModelError(f"--input_examples {key}: expected a list of dicts, not {type(examples).__name__}")
        feeds[key] = np.array([_example(key, e) for e in examples], dtype=object)
    return feeds


def _numpy_dtype(info: TensorInfo):
    import tensorflow as tf

    return tf.dtypes.as_dtype(info.dtype).as_numpy_dtype


def coerce(key: str, value, info: TensorInfo, signature: str):
    """``value`` as the signature's dtype, or a SavedModelError saying why it cannot be."""
    import numpy as np

    if info.dtype == "string":
        if value.dtype.kind not in "USO":
            raise SavedModelError(f"input {key!r} of {signature!r} expects string, got {value.dtype}")
        return value
    want = np.dtype(_numpy_dtype(info))
    if value.dtype != want:
        if value.dtype.kind not in "biuf" or not np.can_cast(value.dtype, want, "same_kind"):
            raise SavedModelError(f"input {key!r} of {signature!r} expects {info.dtype}, got {value.dtype} "
                                  f"(not converted: it would change the kind of value)")
        if want.kind in "iu" and value.size:
            limits = np.iinfo(want)
            if value.min() < limits.min or value.max() > limits.max:
                raise SavedModelError(f"input {key!r} of {signature!r} expects {info.dtype}, got {value.dtype} "
                                      f"values outside its range [{limits.min}, {limits.max}]")
        value = value.astype(want)
    if info.shape is not None:
        shape = value.shape
        if len(shape) != len(info.shape) or any(w is not None and w != d for w, d in zip(info.shape, shape)):
            raise SavedModelError(f"input {key!r} of {signature!r} has shape {tuple(shape)}, the signature "
                                  f"expects {info.shape_text()} (-1: any size)")
    return value


def check_feeds(feeds: dict, sig: SignatureInfo) -> dict:
    unknown = sorted(set(feeds) - set(sig.inputs))
    if unknown:
        raise SavedModelError(f"unknown input(s) {', '.join(map(repr, unknown))} for signature {sig.name!r}; "
                              f"expected: {', '.join(sig.inputs)}")
    missing = [k for k in sig.inputs if k not in feeds]
    if missing:
        raise SavedModelError(f"missing input(s) {', '.join(map(repr, missing))} for signature {sig.name!r} "
                              f"(give them with --inputs or --input_exprs); expected: {', '.join(sig.inputs)}")
    return {k: coerce(k, feeds[k], sig.inputs[k], sig.name) for k in sig.inputs}


def _output_paths(outdir: str, keys, overwrite: bool) -> dict[str, Path]:
    paths = {}
    for key in keys:
        if os.sep in key or key in (".", ".."):
            raise SavedModelError(f"output key {key!r} cannot be used as a file name under --outdir")
        path = Path(outdir) / f"{key}.npy"
        if path.exists() and not overwrite:
            raise SavedModelError(f"output file {path} already exists; add --overwrite to replace it")
        paths[key] = path
    return paths


def run_signature(path, tag_set: str, signature: str, feeds: dict) -> dict:
    """Load the SavedModel (after ``import tfxla_plugin``) and call ``signature`` on ``feeds``."""
    import tensorflow as tf

    import tfxla_plugin  # noqa: F401  (registers TfxlaLaunch, so wrapped models load)

    try:
        loaded = tf.saved_model.load(str(path), tags=sorted(t.strip() for t in tag_set.split(",") if t.strip()))
    except Exception as e:  # noqa: BLE001  (reported in one line; the command's user did nothing wrong in code)
        raise SavedModelError(f"--dir {path}: cannot load the SavedModel: {_first_line(e)}") from None
    fn = loaded.signatures[signature]
    try:
        outputs = fn(**{k: tf.constant(v) for k, v in feeds.items()})
    except (tf.errors.OpError, ValueError, TypeError) as e:
        raise SavedModelError(f"running signature {signature!r} failed: {_first_line(e)}") from None
    if not isinstance(outputs, dict):
        outputs = {"output_0": outputs}
    return {k: outputs[k].numpy() for k in sorted(outputs)}


def execute(args: argparse.Namespace) -> int:
    import numpy as np

    path = check_dir(args.dir)
    signatures = read_signatures(path, args.tag_set)
    if args.signature_def not in signatures:
        raise SavedModelError(f"--dir {path}: no signature {args.signature_def!r}; signatures: "
                              f"{', '.join(signatures) or 'none'}")
    sig = signatures[args.signature_def]
    if not args.inputs and not args.input_exprs and not args.input_examples and sig.inputs:
        raise SavedModelError(f"no inputs given; signature {sig.name!r} expects: {', '.join(sig.inputs)} "
                              f"(use --inputs, --input_exprs or --input_examples)")
    feeds = parse_inputs(args.inputs or "")
    feeds.update(parse_input_exprs(args.input_exprs or ""))
    feeds.update(parse_input_examples(args.input_examples or ""))
    feeds = check_feeds(feeds, sig)
    paths = _output_paths(args.outdir, sig.outputs, args.overwrite) if args.outdir else {}
    outputs = run_signature(path, args.tag_set, sig.name, feeds)
    if args.outdir:
        os.makedirs(args.outdir, exist_ok=True)
    for key, value in outputs.items():  # saved_model_cli run's lines
        print(f"Result for output key {key}:\n{value}")
        if args.outdir:
            target = paths.get(key) or _output_paths(args.outdir, [key], args.overwrite)[key]
            np.save(target, value)
            print(f"Output {key} is saved to {target}")
    return 0


def run(args: argparse.Namespace) -> int:
    try:
        return execute(args)
    except SavedModelError as e:
        print(f"tfxla run: {e}", file=sys.stderr)
        return 1


def register(sub) -> None:
    p = sub.add_parser("run", help="run a SavedModel signature on given inputs (like saved_model_cli run)",
                       description="Run a SavedModel signature on inputs from .npy/.npz files or NumPy "
                                   "expressions and print or save its outputs (like saved_model_cli run).")
    p.add_argument("--dir", required=True, help="the SavedModel directory")
    p.add_argument("--tag_set", default="serve", help="tag-set of the MetaGraphDef, comma-separated (default serve)")
    p.add_argument("--signature_def", default="serving_default", help="signature to run (default serving_default)")
    p.add_argument("--inputs", default="", help="'key=file.npy;key2=file.npz[array]' (';' or ',' between items)")
    p.add_argument("--input_exprs", default="",
                   help="'key=np.ones((2, 3));key2=[1, 2]': NumPy expressions (np is the only name); "
                        "override --inputs")
    p.add_argument("--input_examples", default="",
                   help="'key=[{\"feature\": [1.0, 2.0]}]': lists of tf.train.Example feature dicts, fed "
                        "serialized (as saved_model_cli does)")
    p.add_argument("--outdir", default=None, help="save each output as OUTDIR/<key>.npy instead of printing it")
    p.add_argument("--overwrite", action="store_true", help="replace existing output files in --outdir")
    p.set_defaults(func=run)
