"""Deterministic data parallelism: a micro-batch's gradient over fixed row shards, added
in shard order in the parent, each with the whole batch's denominator, so the bytes depend
on the shard count only (docs/training.md, "Data parallelism"). Workers are persistent
spawned processes sharing one memory block of params and per-shard gradients."""
from __future__ import annotations

import dataclasses
import itertools
import multiprocessing
import weakref
from multiprocessing import shared_memory

import numpy as np

from sparktrain import runtime
from sparktrain.runtime import MAX_WORKERS, default_workers
from sparktrain.core.errors import SparkError
from sparktrain.model import backend
from sparktrain.model.base import Model
from sparktrain.model.build import build_model
from sparktrain.model.config import MAX_SHARDS, ModelConfig
from sparktrain.model.dropout import Dropout

ALIGN = 64  # bytes: every tensor in the shared block starts on a cache line
LOSS_CHUNK = 4  # loss batches in flight per worker: a streamed dataset is never all laid out


def shard_ranges(rows: int, shards: int) -> list[tuple[int, int]]:
    """`shards` contiguous row ranges, sizes differing by at most one; empty ones dropped."""
    bounds = [rows * i // shards for i in range(shards + 1)]
    return [(a, b) for a, b in zip(bounds, bounds[1:]) if b > a]


def slice_rows(batch, start: int, stop: int):
    """Rows start:stop of a batch: every array field cut along its first axis."""
    return dataclasses.replace(batch, **{
        f.name: getattr(batch, f.name)[start:stop] for f in dataclasses.fields(batch)})


def add_in_order(parts: list[dict[str, np.ndarray]]) -> dict[str, np.ndarray]:
    """sum(parts) with the additions in list order: the reduction that fixes the bytes."""
    be = backend.of_params(parts[0])
    total = {name: be.copy(g) for name, g in parts[0].items()}
    for part in parts[1:]:
        for name, g in part.items():
            total[name] += g
    return total


class _Block:
    """One shared-memory block: the params, then one gradient slot per shard."""

    def __init__(self, shapes: dict[str, tuple], dtype, slots: int, name: str | None = None):
        self.shapes, self.dtype, self.slots = shapes, np.dtype(dtype), slots
        self.offsets, size = {}, 0
        for n, shape in shapes.items():
            self.offsets[n] = size
            size += -(-int(np.prod(shape)) * self.dtype.itemsize // ALIGN) * ALIGN
        self.stride = size
        total = size * (slots + 1)
        self.shm = (shared_memory.SharedMemory(create=True, size=total) if name is None
                    else shared_memory.SharedMemory(name=name))

    def region(self, index: int) -> dict[str, np.ndarray]:
        """Region 0 holds the params, region 1 + s shard s's gradients."""
        base = index * self.stride
        return {n: np.ndarray(shape, self.dtype, self.shm.buf, base + self.offsets[n])
                for n, shape in self.shapes.items()}

    def layout(self) -> tuple:
        """_Block(*layout) opens this block in another process."""
        return (self.shapes, self.dtype.str, self.slots, self.shm.name)


def quiet_nonfinite():
    """numpy's overflow / invalid-value warnings off: the loop checks every loss and stops
    with one line ("training diverged ..."), which the warnings would only precede."""
    return np.errstate(over="ignore", invalid="ignore", divide="ignore")


def _worker_main(conn, cfg: dict, layout: tuple) -> None:
    """A worker process: compute the shards it is sent, write their gradients in place."""
    np.seterr(over="ignore", invalid="ignore", divide="ignore")   # see quiet_nonfinite
    block = _Block(*layout)
    model = build_model(ModelConfig.from_dict(cfg))
    params = block.region(0)
    try:
        while True:
            message = conn.recv()
            if message is None:
                break
            kind, denom, work = message
            done = []
            try:
                for slot, batch, drop in work:
                    if kind == "loss":  # forward only: (sum of CE, count) back by value
                        done.append((slot, model.batch_loss(params, batch)))
                        continue
                    loss, grads = model.loss_and_grads(params, batch, denom, drop)
                    out = block.region(1 + slot)
                    for n, g in grads.items():
                        out[n][...] = g
                    done.append((slot, loss))
                conn.send(("ok", done))
            except Exception as err:  # reported by the parent as one line
                conn.send(("error", f"{type(err).__name__}: {err}"))
    except (EOFError, KeyboardInterrupt):
        pass
    finally:
        del params
        block.shm.close()


def _shutdown(procs, conns, shm) -> None:
    for conn in conns:
        try:
            conn.send(None)
        except (OSError, ValueError):
            pass
    for proc in procs:
        proc.join(timeout=5)
        if proc.is_alive():
            proc.kill()
            proc.join()
    for conn in conns:
        conn.close()
    shm.close()
    shm.unlink()


class GradientEngine:
    """`loss_and_grads` over `shards` row shards by `workers` processes (at most one per
    shard), and the forward-only `batch_losses` of whole batches."""

    def __init__(self, model: Model, shards: int = 1, workers: int | None = None):
        runtime.start()  # BLAS threads pinned here too, for a script that loaded numpy first
        if not 1 <= shards <= MAX_SHARDS:
            raise SparkError(f"shards must be in [1, {MAX_SHARDS:,}], got {shards:,}")
        if workers is not None and not 1 <= workers <= MAX_WORKERS:
            raise SparkError(f"workers must be in [1, {MAX_WORKERS}], got {workers:,}")
        self.model, self.shards = model, shards
        self.workers = max(1, min(workers or default_workers(), shards))
        self._procs, self._conns, self._block, self._finalizer = [], [], None, None

    def loss_and_grads(self, params, batch,
                       drop: Dropout | None = None) -> tuple[float, dict[str, np.ndarray]]:
        """`drop`: training's dropout, each shard's masks those of its rows in the batch."""
        if self.shards == 1:
            return self.model.loss_and_grads(params, batch, None, drop)
        rows = int(getattr(batch, dataclasses.fields(batch)[0].name).shape[0])
        ranges = shard_ranges(rows, self.shards)
        denom = max(float(batch.n_counted), 1.0)  # the whole batch's mean denominator
        parts = [slice_rows(batch, a, b) for a, b in ranges]
        drops = [None if drop is None else drop._replace(row0=drop.row0 + a) for a, _ in ranges]
        if self.workers == 1 or len(parts) == 1:
            # one process (a GPU device always: Device.workers): shards one after another
            results = [self.model.loss_and_grads(params, part, denom, d)
                       for part, d in zip(parts, drops)]
        else:
            results = self._parallel(params, parts, denom, drops=drops)
        loss = 0.0
        for part_loss, _ in results:
            loss += part_loss  # in shard order, as the gradients
        return loss, add_in_order([grads for _, grads in results])

    def batch_losses(self, params, batches) -> list[tuple[float, int]]:
        """The model's batch_loss of each batch (any iterable), in order: each batch whole
        in one process, a few at a time per worker, so any worker count gives the same list."""
        if self.workers == 1:
            return [self.model.batch_loss(params, batch) for batch in batches]
        results, pending = [], iter(batches)
        while chunk := list(itertools.islice(pending, LOSS_CHUNK * self.workers)):
            results += self._parallel(params, chunk, None, kind="loss")
        return results

    def _parallel(self, params, parts, denom, kind="grads", drops=None):
        self._start(params)
        shared = self._block.region(0)
        for n, p in params.items():
            shared[n][...] = p
        # part s goes to worker s % workers; worker 0 is this process
        drops = drops or [None] * len(parts)
        for w, conn in enumerate(self._conns, start=1):
            conn.send((kind, denom, [(s, parts[s], drops[s])
                                     for s in range(w, len(parts), self.workers)]))
        results = [None] * len(parts)
        for s in range(0, len(parts), self.workers):
            results[s] = (self.model.batch_loss(params, parts[s]) if kind == "loss" else
                          self.model.loss_and_grads(params, parts[s], denom, drops[s]))
        for w, conn in enumerate(self._conns, start=1):
            try:
                status, payload = conn.recv()
            except (EOFError, OSError):
                self.close()
                raise SparkError(f"gradient worker {w} exited unexpectedly (a script that "
                                 f"trains with workers needs `if __name__ == \"__main__\":`; "
                                 f"SPARK_WORKERS=1 runs without them)") from None
            if status != "ok":
                self.close()
                raise SparkError(f"gradient worker {w} failed: {payload}")
            for s, value in payload:
                results[s] = value if kind == "loss" else (value, self._block.region(1 + s))
        return results

    def _start(self, params) -> None:
        if self._block is not None:
            return
        shapes = {n: tuple(p.shape) for n, p in params.items()}
        dtype = next(iter(params.values())).dtype
        self._block = _Block(shapes, dtype, self.shards)
        ctx = multiprocessing.get_context("spawn")
        cfg = self.model.cfg.to_dict()
        for _ in range(self.workers - 1):
            parent, child = ctx.Pipe()
            proc = ctx.Process(target=_worker_main, args=(child, cfg, self._block.layout()),
                               daemon=True)
            proc.start()
            child.close()
            self._procs.append(proc)
            self._conns.append(parent)
        self._finalizer = weakref.finalize(self, _shutdown, self._procs, self._conns,
                                           self._block.shm)

    def close(self) -> None:
        """Stop the workers and free the shared block (also at exit or garbage collection)."""
        if self._finalizer is not None:
            self._finalizer()
        self._procs, self._conns, self._block, self._finalizer = [], [], None, None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
