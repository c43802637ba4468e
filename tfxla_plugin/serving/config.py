"""What ``tfxla serve`` serves and how: models, version policies, batching and monitoring, in TF Serving's formats.

Three text-format protobuf files, read as TF Serving reads them (``google.protobuf.text_format``), so the
files of a TF Serving deployment work unchanged:

* ``--model_config_file``: a ``ModelServerConfig`` (``model_config_list { config { name base_path
  model_platform model_version_policy version_labels } }``), parsed with the real protos of the
  ``tensorflow-serving-api`` package (``tensorflow_serving/config/model_server_config.proto``);
* ``--batching_parameters_file``: a ``BatchingParameters`` (``max_batch_size { value: 8 }`` ...);
* ``--monitoring_config_file``: a ``MonitoringConfig`` (``prometheus_config { enable: true path: ... }``).

The last two messages are not in that package (they live in TF Serving's server code), so they are
declared here with TF Serving's field names, types and numbers. Every problem is a ``ConfigError``
naming the file and, for a syntax error or an unknown field, the line.

A model to serve is a ``ModelConfig``: its name, base path, ``VersionPolicy`` and version labels.
``--dir D`` is a model whose only version (1) is ``D`` itself (``single_dir``); a base path holds
numbered version directories ``BASE/<N>/``.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

SERVING_API = "pip install --no-deps \"tensorflow-serving-api==2.21.*\""
PROMETHEUS_PATH = "/monitoring/prometheus/metrics"
_PLATFORMS = ("", "tensorflow")  # TF Serving's default platform is "tensorflow"


class ConfigError(ValueError):
    """A configuration file or flag combination that cannot be served; the message names the file and line."""


@dataclass(frozen=True)
class VersionPolicy:
    """TF Serving's ``ServableVersionPolicy``: ``latest`` (the ``num_versions`` newest), ``all``, or ``specific``."""

    kind: str = "latest"
    num_versions: int = 1
    versions: tuple[int, ...] = ()

    def select(self, on_disk: set[int]) -> set[int]:
        """The versions to serve out of those found on disk."""
        if self.kind == "all":
            return set(on_disk)
        if self.kind == "specific":
            return on_disk & set(self.versions)
        return set(sorted(on_disk)[-self.num_versions:])

    def describe(self) -> str:
        if self.kind == "latest":
            return f"latest {self.num_versions}"
        return "all" if self.kind == "all" else f"specific {list(self.versions)}"


@dataclass(frozen=True)
class ModelConfig:
    name: str
    base_path: Path
    policy: VersionPolicy = VersionPolicy()
    labels: dict[str, int] = field(default_factory=dict)
    single_dir: bool = False  # --dir: base_path is the SavedModel, served as version 1, never polled


def check_name(name: str, where: str = "model name") -> str:
    if not name or "/" in name or ":" in name:
        raise ConfigError(f"invalid {where} {name!r} (must be non-empty, without '/' or ':')")
    return name


def single_model(model_dir: str | Path, name: str) -> ModelConfig:
    """``--dir D --model_name NAME``: ``D`` served as version 1."""
    return ModelConfig(check_name(name), Path(model_dir).resolve(), single_dir=True)


def base_path_model(base_path: str | Path, name: str) -> ModelConfig:
    """``--model_base_path BASE --model_name NAME``: the newest numbered version under ``BASE``."""
    path = Path(base_path).resolve()
    if not path.is_dir():
        raise ConfigError(f"--model_base_path {base_path}: not a directory")
    return ModelConfig(check_name(name), path)


def model_configs(model_dir=None, model_name: str = "default", model_base_path=None,
                  model_config_file=None) -> list[ModelConfig]:
    """The models of exactly one of ``--dir``, ``--model_base_path`` and ``--model_config_file``."""
    given = [flag for flag, value in (("--dir", model_dir), ("--model_base_path", model_base_path),
                                      ("--model_config_file", model_config_file)) if value is not None]
    if len(given) != 1:
        raise ConfigError("give exactly one of --dir, --model_base_path and --model_config_file"
                          + (f" (got {' and '.join(given)})" if given else ""))
    if model_dir is not None:
        return [single_model(model_dir, model_name)]
    if model_base_path is not None:
        return [base_path_model(model_base_path, model_name)]
    return parse_model_config_file(model_config_file)


# ---- text-format files ---------------------------------------------------------------------------

def _parse(path: str | Path, message: Any, what: str) -> Any:
    from google.protobuf import text_format

    try:
        text = Path(path).read_text()
    except OSError as e:
        raise ConfigError(f"{what} {path}: cannot read it: {e.strerror or e}") from None
    try:
        return text_format.Parse(text, message)
    except text_format.ParseError as e:
        line = e.GetLine()
        reason = str(e).split(" : ", 1)[-1] if line else str(e)
        raise ConfigError(f"{what} {path}" + (f", line {line}" if line else "") + f": {reason}") from None


def _serving_config_pb2():
    try:
        from tensorflow_serving.config import model_server_config_pb2
    except ImportError as e:
        raise ConfigError(f"--model_config_file needs TF Serving's protos: {SERVING_API} ({e})") from None
    return model_server_config_pb2


def _policy(proto, where: str) -> VersionPolicy:
    kind = proto.WhichOneof("policy_choice") or "latest"
    if kind == "latest":
        n = proto.latest.num_versions or 1
        if n < 0:
            raise ConfigError(f"{where}: latest {{ num_versions: {n} }} must be positive")
        return VersionPolicy("latest", num_versions=n)
    if kind == "specific":
        if not proto.specific.versions:
            raise ConfigError(f"{where}: specific {{ }} names no versions")
        return VersionPolicy("specific", versions=tuple(sorted(set(proto.specific.versions))))
    return VersionPolicy("all")


def parse_model_config_file(path: str | Path) -> list[ModelConfig]:
    """The models of a TF Serving ``--model_config_file``; relative base paths are relative to the file."""
    pb2 = _serving_config_pb2()
    config = _parse(path, pb2.ModelServerConfig(), "--model_config_file")
    if config.WhichOneof("config") != "model_config_list" or not config.model_config_list.config:
        raise ConfigError(f"--model_config_file {path}: no model_config_list {{ config {{ ... }} }}")
    models, root = [], Path(path).resolve().parent
    for i, c in enumerate(config.model_config_list.config):
        where = f"--model_config_file {path}, config {i + 1}" + (f" ('{c.name}')" if c.name else "")
        if not c.name:
            raise ConfigError(f"{where}: no name")
        check_name(c.name, f"model name in {where}:")
        if not c.base_path:
            raise ConfigError(f"{where}: no base_path")
        if c.model_platform not in _PLATFORMS:
            raise ConfigError(f"{where}: model_platform {c.model_platform!r} is not served (only \"tensorflow\")")
        if any(m.name == c.name for m in models):
            raise ConfigError(f"{where}: model name '{c.name}' given twice")
        base = (root / c.base_path).resolve()
        if not base.is_dir():
            raise ConfigError(f"{where}: base_path {c.base_path}: not a directory")
        labels = dict(c.version_labels)
        bad = [k for k, v in labels.items() if v <= 0 or not k]
        if bad:
            raise ConfigError(f"{where}: version label '{bad[0]}' must map to a positive version")
        models.append(ModelConfig(c.name, base, _policy(c.model_version_policy, where), labels))
    return models


# BatchingParameters and MonitoringConfig as TF Serving declares them
# (servables/tensorflow/session_bundle_config.proto, config/monitoring_config.proto).
_INT64, _STRING = "google.protobuf.Int64Value", "google.protobuf.StringValue"
_MESSAGES = {
    "BatchingParameters": [("max_batch_size", 1, _INT64), ("batch_timeout_micros", 2, _INT64),
                           ("max_enqueued_batches", 3, _INT64), ("num_batch_threads", 4, _INT64),
                           ("thread_pool_name", 5, _STRING), ("allowed_batch_sizes", 6, "repeated int64"),
                           ("pad_variable_length_inputs", 7, "bool")],
    "PrometheusConfig": [("enable", 1, "bool"), ("path", 2, "string")],
    "MonitoringConfig": [("prometheus_config", 1, ".tfxla.serving.PrometheusConfig")],
}


@functools.cache
def _message_class(name: str):
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory, wrappers_pb2

    pool = descriptor_pool.DescriptorPool()
    wrappers = descriptor_pb2.FileDescriptorProto()
    wrappers_pb2.DESCRIPTOR.CopyToProto(wrappers)
    pool.Add(wrappers)
    file = descriptor_pb2.FileDescriptorProto(name="tfxla/serving_config.proto", package="tfxla.serving",
                                              syntax="proto3", dependency=[wrappers.name])
    F = descriptor_pb2.FieldDescriptorProto
    scalars = {"bool": F.TYPE_BOOL, "string": F.TYPE_STRING, "int64": F.TYPE_INT64}
    for message, fields in _MESSAGES.items():
        m = file.message_type.add(name=message)
        for fname, number, kind in fields:
            repeated = kind.startswith("repeated ")
            kind = kind.removeprefix("repeated ")
            f = m.field.add(name=fname, number=number, label=F.LABEL_REPEATED if repeated else F.LABEL_OPTIONAL)
            if kind in scalars:
                f.type = scalars[kind]
            else:
                f.type, f.type_name = F.TYPE_MESSAGE, kind if kind.startswith(".") else "." + kind
    pool.Add(file)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName(f"tfxla.serving.{name}"))


def parse_batching_parameters(path: str | Path) -> dict[str, Any]:
    """A TF Serving ``--batching_parameters_file`` as ``ServeOptions`` fields (only those the file sets)."""
    p = _parse(path, _message_class("BatchingParameters")(), "--batching_parameters_file")
    where = f"--batching_parameters_file {path}"
    out: dict[str, Any] = {}
    for name in ("max_batch_size", "batch_timeout_micros", "max_enqueued_batches", "num_batch_threads"):
        if p.HasField(name):
            out[name] = getattr(p, name).value
    sizes = tuple(p.allowed_batch_sizes)
    if sizes:
        if list(sizes) != sorted(set(sizes)) or sizes[0] < 1:
            raise ConfigError(f"{where}: allowed_batch_sizes must be positive and increasing, got {list(sizes)}")
        if "max_batch_size" in out and sizes[-1] != out["max_batch_size"]:
            raise ConfigError(f"{where}: the last of allowed_batch_sizes ({sizes[-1]}) must equal max_batch_size "
                              f"({out['max_batch_size']})")
        out["allowed_batch_sizes"] = sizes
        out.setdefault("max_batch_size", sizes[-1])
    return out


def parse_monitoring_config(path: str | Path) -> str | None:
    """The Prometheus path a TF Serving ``--monitoring_config_file`` enables (None: not enabled)."""
    c = _parse(path, _message_class("MonitoringConfig")(), "--monitoring_config_file")
    prometheus = c.prometheus_config
    if not prometheus.enable:
        return None
    route = prometheus.path or PROMETHEUS_PATH
    if not route.startswith("/") or route.startswith("/v1/"):
        raise ConfigError(f"--monitoring_config_file {path}: prometheus_config path {route!r} must start with '/' "
                          "and not with /v1/")
    return route
