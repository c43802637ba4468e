"""TF Serving's JSON encoding of predict requests and answers, to and from NumPy arrays.

Row format: ``{"instances": [...]}``: with one input each instance is that input's row; with
several, each instance is an object naming every input; answered with ``{"predictions": ...}``
(a list of rows for one output, a list of objects for several). Columnar format:
``{"inputs": value | {name: value}}``, answered with ``{"outputs": value | {name: value}}``.
Binary strings travel as ``{"b64": "..."}``; outputs named ``*_bytes`` (or not valid UTF-8) are
answered that way. Every problem is a ``RequestError`` naming the input, key or signature at fault.
"""

from __future__ import annotations

import base64
import binascii
from dataclasses import dataclass
from typing import Any, Mapping

import numpy as np

from tfxla_plugin.serving.model import Signature, TensorInfo

ROW, COLUMNAR = "row", "columnar"
REQUEST_KEYS = ("signature_name", "instances", "inputs")
DEFAULT_SIGNATURE = "serving_default"


class RequestError(Exception):
    """A request the server refuses; ``status`` is the HTTP status, the message goes to the client."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status
        self.message = message


@dataclass(frozen=True)
class PredictRequest:
    """A parsed predict request: its format, signature and checked input arrays."""

    format: str
    signature: Signature
    inputs: dict[str, np.ndarray]


def bad(message: str) -> RequestError:
    return RequestError(400, message)


# Which JSON-derived NumPy kinds each target kind accepts ('b' bool, 'i'/'u' ints, 'f'/'c' floats).
_ACCEPTED_KINDS = {"b": "b", "i": "iu", "u": "iu", "f": "iuf", "c": "iufc"}
_KIND_WORDS = {"b": "booleans", "i": "integers", "u": "integers", "f": "numbers", "c": "numbers",
               "U": "strings", "S": "strings", "O": "mixed or non-numeric values"}


def _decode_string_leaf(leaf: Any, where: str) -> bytes:
    if isinstance(leaf, str):
        return leaf.encode()
    if isinstance(leaf, dict) and set(leaf) == {"b64"} and isinstance(leaf["b64"], str):
        try:
            return base64.b64decode(leaf["b64"], validate=True)
        except binascii.Error as e:
            raise bad(f"{where}: invalid base64 in {{\"b64\": ...}}: {e}") from None
    raise bad(f"{where}: expected strings (or {{\"b64\": ...}} objects), got {type(leaf).__name__}")


def _string_array(value: Any, where: str) -> np.ndarray:
    def convert(v):
        return [convert(x) for x in v] if isinstance(v, list) else _decode_string_leaf(v, where)

    nested = convert(value)
    try:
        arr = np.array(nested, dtype=object)
    except ValueError as e:
        raise bad(f"{where}: ragged nested list ({e})") from None
    if arr.size and any(isinstance(x, list) for x in arr.flat):
        raise bad(f"{where}: ragged nested list (rows of different lengths)")
    return arr


def _numeric_array(value: Any, info: TensorInfo, where: str) -> np.ndarray:
    try:
        arr = np.asarray(value)
    except (ValueError, OverflowError) as e:
        raise bad(f"{where}: ragged nested list or out-of-range number ({e})") from None
    target = info.np_dtype
    if arr.size == 0:
        return arr.astype(target)
    target_kind = "f" if target.kind == "V" else target.kind  # ml_dtypes' bfloat16, float8_*: floats
    if arr.dtype.kind not in _ACCEPTED_KINDS.get(target_kind, ""):
        got = _KIND_WORDS.get(arr.dtype.kind, str(arr.dtype))
        raise bad(f"{where}: expected {info.dtype} values, got {got}")
    if target_kind in "iu":
        limits = np.iinfo(target)
        if arr.min() < limits.min or arr.max() > limits.max:
            raise bad(f"{where}: value out of range for {info.dtype} [{limits.min}, {limits.max}]")
    with np.errstate(over="ignore"):
        return arr.astype(target)


def to_array(value: Any, info: TensorInfo, where: str) -> np.ndarray:
    """``value`` (nested JSON lists) as an array of ``info``'s dtype, its shape checked."""
    if value is None:
        raise bad(f"{where}: null is not a tensor value")
    arr = _string_array(value, where) if info.dtype == "string" else _numeric_array(value, info, where)
    _check_shape(arr, info, where)
    return arr


def _check_shape(arr: np.ndarray, info: TensorInfo, where: str) -> None:
    if info.shape is not None:
        ok = arr.ndim == len(info.shape) and all(d is None or d == n for d, n in zip(info.shape, arr.shape))
        if not ok:
            raise bad(f"{where}: expected shape {info.shape_text()}, got {list(arr.shape)}")


def _named(values: Mapping[str, Any], sig: Signature, what: str) -> dict[str, Any]:
    unknown = [k for k in values if k not in sig.inputs]
    if unknown:
        raise bad(f"{what}: unknown input '{unknown[0]}'; signature '{sig.name}' takes inputs: "
                  f"{', '.join(sig.inputs)}")
    missing = [k for k in sig.inputs if k not in values]
    if missing:
        raise bad(f"{what}: missing input '{missing[0]}' of signature '{sig.name}'")
    return dict(values)


def _row_values(instances: Any, sig: Signature) -> dict[str, Any]:
    if not isinstance(instances, list) or not instances:
        raise bad("'instances' must be a non-empty list (one entry per row)")
    objects = [isinstance(x, dict) and not (set(x) == {"b64"}) for x in instances]
    if all(objects):
        per_row = [_named(x, sig, f"instance {i}") for i, x in enumerate(instances)]
        return {name: [row[name] for row in per_row] for name in sig.inputs}
    if any(objects):
        raise bad("'instances' mixes objects and plain values; use objects naming every input in each")
    if len(sig.inputs) != 1:
        raise bad(f"signature '{sig.name}' has inputs {', '.join(sig.inputs)}: each instance must be "
                  "an object naming every input")
    return {next(iter(sig.inputs)): instances}


def _columnar_values(inputs: Any, sig: Signature) -> dict[str, Any]:
    if isinstance(inputs, dict) and set(inputs) != {"b64"}:
        return _named(inputs, sig, "'inputs'")
    if len(sig.inputs) != 1:
        raise bad(f"signature '{sig.name}' has inputs {', '.join(sig.inputs)}: 'inputs' must be an "
                  "object naming every input")
    return {next(iter(sig.inputs)): inputs}


def signature(signatures: Mapping[str, Signature], name: Any) -> Signature:
    """The signature a request names; ``""`` (or none) is the default one, ``serving_default``, as in TF Serving."""
    if not isinstance(name, str):
        raise bad("'signature_name' must be a string")
    name = name or DEFAULT_SIGNATURE
    if name not in signatures:
        raise bad(f"unknown signature '{name}'; the model has: {', '.join(signatures)}")
    return signatures[name]


def check_array(arr: np.ndarray, info: TensorInfo, where: str) -> np.ndarray:
    """A decoded tensor (gRPC's ``TensorProto``) checked against ``info``: the same dtype, a matching shape."""
    if info.dtype == "string":
        ok = arr.dtype == object or arr.dtype.kind == "S"
    else:
        ok = arr.dtype == info.np_dtype
    if not ok:
        raise bad(f"{where}: expected {info.dtype} values, got {arr.dtype}")
    _check_shape(arr, info, where)
    return arr.astype(object) if info.dtype == "string" else arr


def parse_predict(body: Any, signatures: Mapping[str, Signature]) -> PredictRequest:
    """Validates a decoded JSON predict body against the model's signatures."""
    if not isinstance(body, dict):
        raise bad(f"the request body must be a JSON object, got {type(body).__name__}")
    unknown = [k for k in body if k not in REQUEST_KEYS]
    if unknown:
        raise bad(f"unknown key '{unknown[0]}' in the request; expected {', '.join(REQUEST_KEYS)}")
    sig = signature(signatures, body.get("signature_name", ""))
    if ("instances" in body) == ("inputs" in body):
        raise bad("the request must have exactly one of 'instances' (row format) or 'inputs' (columnar)")
    if "instances" in body:
        fmt, values = ROW, _row_values(body["instances"], sig)
    else:
        fmt, values = COLUMNAR, _columnar_values(body["inputs"], sig)
    arrays = {k: to_array(v, sig.inputs[k], f"input '{k}'") for k, v in values.items()}
    return PredictRequest(format=fmt, signature=sig, inputs=arrays)


def _jsonable(arr: np.ndarray, binary: bool) -> Any:
    if arr.dtype.kind == "V":  # ml_dtypes' bfloat16, float8_*: JSON numbers via float32
        arr = arr.astype(np.float32)
    if arr.dtype.kind == "c":
        raise RequestError(500, f"complex outputs ({arr.dtype}) have no JSON encoding")
    if arr.dtype != object:
        return arr.tolist()

    def leaf(v):
        if isinstance(v, bytes):
            if not binary:
                try:
                    return v.decode()
                except UnicodeDecodeError:
                    pass
            return {"b64": base64.b64encode(v).decode()}
        return v

    def walk(v):
        return [walk(x) for x in v] if isinstance(v, list) else leaf(v)

    return walk(arr.tolist())


def encode_predict(fmt: str, outputs: Mapping[str, np.ndarray]) -> dict:
    """The answer body for ``outputs`` (sorted by name) of a request in format ``fmt``."""
    enc = {k: _jsonable(v, k.endswith("_bytes")) for k, v in outputs.items()}
    if fmt == COLUMNAR:
        return {"outputs": next(iter(enc.values())) if len(enc) == 1 else enc}
    if len(enc) == 1:
        return {"predictions": next(iter(enc.values()))}
    rows = {k: (v.shape[0] if v.ndim else None) for k, v in outputs.items()}
    if len(set(rows.values())) != 1 or None in rows.values():
        raise bad(f"the outputs have different batch sizes {rows}, which the row format cannot "
                  "express; send the request in columnar format ('inputs')")
    n = next(iter(rows.values()))
    return {"predictions": [{k: enc[k][i] for k in enc} for i in range(n)]}
