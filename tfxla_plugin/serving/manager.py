"""The versions of every served model: what is on disk, what is loaded, what requests run on.

Each model (``config.ModelConfig``) has numbered version directories ``BASE/<N>/`` (``--dir``: one
version, 1, the directory itself). ``ModelManager.poll`` compares them with what is loaded and, as
TF Serving's availability-preserving policy does:

1. loads each version the ``VersionPolicy`` selects that is not loaded yet (state LOADING, then
   AVAILABLE, or END with the load error; a failed version is not retried until its directory goes);
2. only then unloads the versions the policy no longer selects, and only while some selected version
   is AVAILABLE (a new version that fails to load leaves the old one serving). An unloading version
   takes no new requests (UNLOADING) and ends (END) once the requests already running on it are done.

Requests hold a ``Servable`` through ``ModelManager.acquire`` for as long as they run, so a version
switch never fails a request: a request started on the old version finishes there, later ones go to
the new one. ``start`` polls every ``poll_wait_s`` seconds on a daemon thread (TF Serving's
``--file_system_poll_wait_seconds``; 0: never). State changes and lookups take one lock; loading
runs outside it.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator

from tfxla_plugin.serving.codec import RequestError
from tfxla_plugin.serving.config import ModelConfig

log = logging.getLogger("tfxla_plugin.serving")
START, LOADING, AVAILABLE, UNLOADING, END = "START", "LOADING", "AVAILABLE", "UNLOADING", "END"

# (model directory, version) -> the loaded model (``model.ServedModel``); raises on failure.
Loader = Callable[[Path, int], Any]


@dataclass
class VersionStatus:
    """TF Serving's ``ModelVersionStatus``: a state and, after a failure, the error."""

    version: int
    state: str
    error_code: str = "OK"
    error_message: str = ""

    def as_json(self) -> dict:
        return {"version": str(self.version), "state": self.state,
                "status": {"error_code": self.error_code, "error_message": self.error_message}}


@dataclass(eq=False)
class Servable:
    """One loaded version: the model, the requests running on it, and state owned by the serving core."""

    name: str
    version: int
    model: Any
    inflight: int = 0
    extra: dict = field(default_factory=dict)  # the core's per-version objects (its batcher)


@dataclass
class _Model:
    config: ModelConfig
    statuses: dict[int, VersionStatus] = field(default_factory=dict)
    live: dict[int, Servable] = field(default_factory=dict)  # AVAILABLE versions, served
    failed: dict[int, Exception] = field(default_factory=dict)  # version -> its load error
    skipped: set[int] = field(default_factory=set)  # numbered directories without a saved_model.pb (logged once)


def version_dirs(config: ModelConfig) -> dict[int, Path]:
    """Version -> directory of the SavedModels on disk (numbered sub-directories holding ``saved_model.pb``)."""
    if config.single_dir:
        return {1: config.base_path}
    found = {}
    try:
        children = list(config.base_path.iterdir())
    except OSError as e:
        log.warning("tfxla serve: cannot list %s: %s", config.base_path, e)
        return {}
    for child in children:
        if child.name.isdigit() and int(child.name) > 0 and child.is_dir():
            found[int(child.name)] = child
    return found


class ModelManager:
    """Loads and unloads the versions of ``configs`` (see the module docstring); thread safe."""

    def __init__(self, configs: list[ModelConfig], loader: Loader, poll_wait_s: float = 1.0,
                 on_unload: Callable[[Servable], None] | None = None):
        if not configs:
            raise ValueError("no model to serve")
        if poll_wait_s < 0:
            raise ValueError(f"file_system_poll_wait_seconds must be >= 0, got {poll_wait_s}")
        self._models = {c.name: _Model(c) for c in configs}
        self._loader, self.poll_wait_s, self._on_unload = loader, poll_wait_s, on_unload
        self._lock = threading.Condition()
        self._poll_lock = threading.Lock()  # one poll at a time
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def names(self) -> list[str]:
        return list(self._models)

    def config(self, name: str) -> ModelConfig:
        return self._models[name].config

    # ---- loading and unloading ---------------------------------------------------------------------

    def poll(self) -> None:
        """One pass over every model: load the selected versions, then unload the ones no longer selected."""
        with self._poll_lock:
            for m in self._models.values():
                self._poll_model(m)

    def _poll_model(self, m: _Model) -> None:
        on_disk = version_dirs(m.config)
        ready = {}
        for v, path in on_disk.items():
            if m.config.single_dir or (path / "saved_model.pb").is_file():  # --dir: the loader says what is wrong
                ready[v] = path
            elif v not in m.skipped:
                m.skipped.add(v)
                log.warning("tfxla serve: model '%s': %s has no saved_model.pb (yet); not loaded", m.config.name, path)
        for v in set(m.failed) - set(ready):  # a failed version whose directory went is tried again if it returns
            del m.failed[v]
        wanted = m.config.policy.select(set(ready))
        for v in sorted(wanted - set(m.live) - set(m.failed), reverse=True):
            self._load(m, v, ready[v])
        with self._lock:
            keep = any(v in m.live for v in wanted) or not wanted
            retiring = [m.live.pop(v) for v in sorted(m.live) if v not in wanted] if keep else []
            for s in retiring:
                m.statuses[s.version] = VersionStatus(s.version, UNLOADING)
        for s in retiring:
            self._unload(m, s)

    def _load(self, m: _Model, version: int, path: Path) -> None:
        name = m.config.name
        with self._lock:
            m.statuses[version] = VersionStatus(version, LOADING)
        log.info("tfxla serve: loading model '%s' version %d from %s", name, version, path)
        try:
            model = self._loader(path, version)
        except Exception as e:  # noqa: BLE001  (any load failure is this version's status, not the server's)
            log.error("tfxla serve: model '%s' version %d failed to load: %s", name, version, e)
            with self._lock:
                m.failed[version] = e
                m.statuses[version] = VersionStatus(version, END, "UNKNOWN", str(e)[:2000])
            return
        with self._lock:
            m.live[version] = Servable(name, version, model)
            m.statuses[version] = VersionStatus(version, AVAILABLE)
        log.info("tfxla serve: model '%s' version %d is AVAILABLE", name, version)

    def _unload(self, m: _Model, s: Servable) -> None:
        with self._lock:
            self._lock.wait_for(lambda: s.inflight == 0)
            m.statuses[s.version] = VersionStatus(s.version, END)
        if self._on_unload is not None:
            self._on_unload(s)
        log.info("tfxla serve: model '%s' version %d unloaded", s.name, s.version)

    def load_initial(self) -> None:
        """The first poll; raises the first load error (the server does not start with a model it cannot load)."""
        self.poll()
        for m in self._models.values():
            for e in m.failed.values():
                raise e
            if not m.live:
                log.warning("tfxla serve: no versions of model '%s' under %s yet; polling", m.config.name,
                            m.config.base_path)

    def start(self) -> None:
        """Polls every ``poll_wait_s`` seconds on a daemon thread (not with 0 or only ``--dir`` models)."""
        if self.poll_wait_s == 0 or all(m.config.single_dir for m in self._models.values()):
            return
        self._thread = threading.Thread(target=self._poll_loop, name="tfxla-serve-poll", daemon=True)
        self._thread.start()

    def _poll_loop(self) -> None:
        while not self._stop.wait(self.poll_wait_s):
            try:
                self.poll()
            except Exception:  # noqa: BLE001  (keep polling; the next pass may succeed)
                log.exception("tfxla serve: polling the model directories failed")

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=60)
            self._thread = None

    # ---- requests ----------------------------------------------------------------------------------

    def _model(self, name: str, version: int | None = None) -> _Model:
        m = self._models.get(name)
        if m is None:
            spec = f"Specific({name}, {version})" if version is not None else f"Latest({name})"
            raise RequestError(404, f"Servable not found for request: {spec}")
        return m

    def resolve_label(self, name: str, label: str) -> int:
        m = self._model(name)
        if label not in m.config.labels:
            raise RequestError(404, f"Unrecognized servable version label: {label}")
        return m.config.labels[label]

    @contextlib.contextmanager
    def acquire(self, name: str, version: int | None = None, label: str | None = None) -> Iterator[Servable]:
        """The servable a request runs on (``version`` or ``label``, else the newest AVAILABLE), held until exit.

        Raises ``RequestError`` 404 when there is none, with TF Serving's message."""
        if label is not None:
            version = self.resolve_label(name, label)
        m = self._model(name, version)
        with self._lock:
            if version is None:
                s = m.live[max(m.live)] if m.live else None
            else:
                s = m.live.get(version)
            if s is None:
                spec = f"Specific({name}, {version})" if version is not None else f"Latest({name})"
                raise RequestError(404, f"Servable not found for request: {spec}")
            s.inflight += 1
        try:
            yield s
        finally:
            with self._lock:
                s.inflight -= 1
                if s.inflight == 0:
                    self._lock.notify_all()

    def statuses(self, name: str, version: int | None = None, label: str | None = None) -> list[VersionStatus]:
        """TF Serving's GetModelStatus: every version known (newest first), or the one asked for."""
        if label is not None:
            version = self.resolve_label(name, label)
        m = self._model(name, version)
        with self._lock:
            known = dict(m.statuses)
        if version is not None:
            if version not in known:
                raise RequestError(404, f"Could not find version {version} of model {name}")
            return [known[version]]
        if not known:
            raise RequestError(404, f"Could not find any versions of model {name}")
        return [known[v] for v in sorted(known, reverse=True)]

    def live(self) -> list[Servable]:
        """Every AVAILABLE servable (for startup lines and counters)."""
        with self._lock:
            return [s for m in self._models.values() for _, s in sorted(m.live.items())]
