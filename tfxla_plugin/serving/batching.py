"""Server-side batching: concurrent requests to one signature merged along dimension 0.

A request joins the open batch of its key (signature, and each input's name, dtype and
non-batch dims), so requests whose non-batch dims differ are never merged. A batch runs when
it holds ``max_batch_size`` rows or ``batch_timeout_micros`` after its first request arrived;
the outputs are split back by each request's row count. If the merged call fails, or an output
does not have the merged batch size, every request of the batch is run on its own instead, so
one bad request cannot fail the others and results always equal unbatched ones for models whose
rows are independent. All bookkeeping happens on the event loop thread (no locks).

TF Serving's other batching parameters (``--batching_parameters_file``): at most ``num_batch_threads``
calls run at once (None: no limit beyond the worker pool); at most ``max_enqueued_batches`` batches
wait, open or full, for such a slot, and a request that would need one more is refused (503,
TF Serving's "queue is full"); ``allowed_batch_sizes`` pads each call's rows up to the next allowed
size with copies of its last row, and the padding rows' outputs are dropped.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Awaitable, Callable, Mapping

import numpy as np

# Runs one signature call off the event loop (the app's worker pool): (signature, inputs) -> outputs.
AsyncRunFn = Callable[[str, Mapping[str, np.ndarray]], Awaitable[dict[str, np.ndarray]]]


@dataclass(frozen=True)
class BatchOptions:
    max_batch_size: int = 32
    batch_timeout_micros: int = 2000
    max_enqueued_batches: int | None = None  # None: no limit
    num_batch_threads: int | None = None  # None: as many as the worker pool runs
    allowed_batch_sizes: tuple[int, ...] = ()

    def __post_init__(self):
        if self.max_batch_size < 1:
            raise ValueError(f"max_batch_size must be >= 1, got {self.max_batch_size}")
        if self.batch_timeout_micros < 0:
            raise ValueError(f"batch_timeout_micros must be >= 0, got {self.batch_timeout_micros}")
        for name in ("max_enqueued_batches", "num_batch_threads"):
            if getattr(self, name) is not None and getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        sizes = self.allowed_batch_sizes
        if sizes and (list(sizes) != sorted(set(sizes)) or sizes[0] < 1 or sizes[-1] != self.max_batch_size):
            raise ValueError(f"allowed_batch_sizes must be positive, increasing and end with max_batch_size "
                             f"({self.max_batch_size}), got {list(sizes)}")

    def padded(self, rows: int) -> int:
        """The rows a call of ``rows`` rows runs with (the next allowed batch size, if any are given)."""
        return next((n for n in self.allowed_batch_sizes if n >= rows), rows)


class QueueFull(Exception):
    """More than ``max_enqueued_batches`` batches would wait; TF Serving answers UNAVAILABLE."""


@dataclass
class BatchStats:
    """Counters shown by ``GET /v1/models/NAME/stats``."""

    calls: int = 0  # signature calls made by the batcher
    merged_calls: int = 0  # calls that ran more than one request
    merged_requests: int = 0  # requests answered by such a call
    max_rows: int = 0  # most rows in one call
    fallbacks: int = 0  # merged calls redone request by request
    padded_rows: int = 0  # rows added to reach an allowed batch size
    refused: int = 0  # requests refused because max_enqueued_batches were waiting

    def as_dict(self) -> dict:
        return dict(self.__dict__)


@dataclass
class _Item:
    inputs: Mapping[str, np.ndarray]
    rows: int
    future: asyncio.Future


@dataclass
class _Open:
    items: list[_Item] = field(default_factory=list)
    rows: int = 0
    timer: asyncio.TimerHandle | None = None


def _rows(inputs: Mapping[str, np.ndarray]) -> int | None:
    """The common dim-0 size of all inputs, or None when they have none (such requests run alone)."""
    sizes = {a.shape[0] if a.ndim else None for a in inputs.values()}
    return sizes.pop() if len(sizes) == 1 else None


class Batcher:
    """Queues requests by key and runs merged calls through ``run``; use from one event loop."""

    def __init__(self, run: AsyncRunFn, options: BatchOptions = BatchOptions(),
                 on_call: Callable[[int], None] | None = None):
        self._run, self.options, self._on_call = run, options, on_call
        self._open: dict[tuple, _Open] = {}
        self._tasks: set[asyncio.Task] = set()
        self._waiting = 0  # batches flushed and waiting for a slot
        self._slots: asyncio.Semaphore | None = None
        self.stats = BatchStats()

    async def submit(self, signature: str, inputs: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        loop = asyncio.get_running_loop()
        rows = _rows(inputs)
        if rows is None or rows == 0 or rows >= self.options.max_batch_size:
            self._count(1, rows or 0)
            return await (self._run(signature, inputs) if not rows else self._call(signature, inputs, rows))
        key = (signature,) + tuple((k, a.dtype.str, a.shape[1:]) for k, a in sorted(inputs.items()))
        if key in self._open and self._open[key].rows + rows > self.options.max_batch_size:
            self._flush(key)
        limit = self.options.max_enqueued_batches
        if key not in self._open and limit is not None and len(self._open) + self._waiting >= limit:
            self.stats.refused += 1
            raise QueueFull(f"the batch scheduling queue is full ({limit} batches waiting: max_enqueued_batches)")
        batch = self._open.setdefault(key, _Open())
        item = _Item(inputs, rows, loop.create_future())
        batch.items.append(item)
        batch.rows += rows
        if batch.rows >= self.options.max_batch_size:
            self._flush(key)
        elif batch.timer is None:
            batch.timer = loop.call_later(self.options.batch_timeout_micros / 1e6, self._flush, key)
        return await item.future

    def _count(self, requests: int, rows: int) -> None:
        s = self.stats
        s.calls += 1
        s.max_rows = max(s.max_rows, rows)
        if requests > 1:
            s.merged_calls += 1
            s.merged_requests += requests
        if self._on_call is not None:
            self._on_call(rows)

    async def _call(self, signature: str, inputs: Mapping[str, np.ndarray], rows: int) -> dict[str, np.ndarray]:
        """One signature call in a batch slot, padded to an allowed batch size; outputs cut back to ``rows``."""
        padded = self.options.padded(rows)
        if padded > rows:
            self.stats.padded_rows += padded - rows
            inputs = {k: np.concatenate([a, np.repeat(a[-1:], padded - rows, axis=0)]) for k, a in inputs.items()}
        if self._slots is None and self.options.num_batch_threads is not None:
            self._slots = asyncio.Semaphore(self.options.num_batch_threads)
        slots = self._slots
        self._waiting += 1
        try:
            if slots is not None:
                await slots.acquire()
        finally:
            self._waiting -= 1
        try:
            out = await self._run(signature, inputs)
        finally:
            if slots is not None:
                slots.release()
        if padded > rows:
            out = {k: v[:rows] if v.ndim and v.shape[0] == padded else v for k, v in out.items()}
        return out

    def _flush(self, key: tuple) -> None:
        batch = self._open.pop(key, None)
        if batch is None:
            return
        if batch.timer is not None:
            batch.timer.cancel()
        task = asyncio.get_running_loop().create_task(self._execute(key[0], batch.items))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _execute(self, signature: str, items: list[_Item]) -> None:
        total = sum(it.rows for it in items)
        if len(items) > 1:
            self._count(len(items), total)
            merged = {k: np.concatenate([it.inputs[k] for it in items]) for k in items[0].inputs}
            try:
                out = await self._call(signature, merged, total)
            except Exception:  # noqa: BLE001  (redo one by one below: each request gets its own answer)
                out = None
            if out is not None and all(v.ndim and v.shape[0] == total for v in out.values()):
                bounds = np.cumsum([it.rows for it in items])[:-1]
                parts = {k: np.split(v, bounds) for k, v in out.items()}
                for i, it in enumerate(items):
                    _resolve(it.future, result={k: p[i] for k, p in parts.items()})
                return
            self.stats.fallbacks += 1
        await asyncio.gather(*(self._execute_one(signature, it) for it in items))

    async def _execute_one(self, signature: str, item: _Item) -> None:
        self._count(1, item.rows)
        try:
            out = await self._call(signature, item.inputs, item.rows)
        except Exception as e:  # noqa: BLE001  (handed to the waiting request, which answers it)
            _resolve(item.future, error=e)
        else:
            _resolve(item.future, result=out)

    async def drain(self) -> None:
        """Runs every open batch now and waits for all running ones (used at shutdown)."""
        for key in list(self._open):
            self._flush(key)
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)


def _resolve(future: asyncio.Future, *, result=None, error: BaseException | None = None) -> None:
    if future.done():  # the request gave up (timeout or disconnect)
        return
    if error is not None:
        future.set_exception(error)
    else:
        future.set_result(result)
