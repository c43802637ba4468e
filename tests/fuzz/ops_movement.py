"""The data-movement rows of the fuzzer's op table (shapes, slicing, indexing, padding).

All of them keep exactness (they copy elements). Gather draws an out-of-range index with
probability 0.05, which TF eager rejects with InvalidArgumentError: the compiled function must
raise the same error class.
"""

from __future__ import annotations

import math

import numpy as np

from tests.fuzz.ops import FI, B, _axis, _fits, row

ANY = FI + B


def _factor_shape(b, size: int) -> tuple[int, ...]:
    """A random shape of ``size`` elements (rank 0-4)."""
    if size == 0:
        dims = [b.dim() for _ in range(int(b.rng.integers(1, 4)))]
        dims[int(b.rng.integers(len(dims)))] = 0
        return tuple(dims)
    if size == 1:
        return (1,) * int(b.rng.integers(0, 4))
    primes, rest, p = [], size, 2
    while rest > 1:
        while rest % p == 0:
            primes.append(p)
            rest //= p
        p += 1
    out = [1] * int(b.rng.integers(1, 5))
    for p in primes:
        out[int(b.rng.integers(len(out)))] *= p
    return tuple(out)


@row("transpose", "movement", 1.0, ANY)
def _transpose(b):
    x = b.choose(ANY, min_rank=2)
    if x is None:
        return None
    perm = [int(p) for p in b.rng.permutation(x.rank)]
    return b.emit(f"tf.transpose({x.name}, perm={perm})", tuple(x.shape[p] for p in perm), x.dtype, x.exact, [x])


@row("reshape", "movement", 1.0, ANY)
def _reshape(b):
    x = b.choose(ANY)
    if x is None:
        return None
    shape = _factor_shape(b, x.size)
    spec = list(shape)
    if x.size and spec and b.rng.random() < 0.3:
        spec[int(b.rng.integers(len(spec)))] = -1
    return b.emit(f"tf.reshape({x.name}, {spec})", shape, x.dtype, x.exact, [x])


@row("expand_dims", "movement", 0.5, ANY)
def _expand_dims(b):
    x = b.choose(ANY)
    if x is None or x.rank >= 4:
        return None
    a = int(b.rng.integers(-x.rank - 1, x.rank + 1))
    shape = list(x.shape)
    shape.insert(a % (x.rank + 1), 1)
    return b.emit(f"tf.expand_dims({x.name}, axis={a})", tuple(shape), x.dtype, x.exact, [x])


@row("squeeze", "movement", 0.5, ANY)
def _squeeze(b):
    x = b.choose(ANY)
    ones = [i for i, d in enumerate(x.shape) if d == 1] if x is not None else []
    if not ones:
        return None
    if b.rng.random() < 0.3:
        return b.emit(f"tf.squeeze({x.name})", tuple(d for d in x.shape if d != 1), x.dtype, x.exact, [x])
    axes = sorted(int(a) for a in b.rng.choice(ones, int(b.rng.integers(1, len(ones) + 1)), replace=False))
    shape = tuple(d for i, d in enumerate(x.shape) if i not in axes)
    return b.emit(f"tf.squeeze({x.name}, axis={axes})", shape, x.dtype, x.exact, [x])


@row("concat", "movement", 1.0, ANY)
def _concat(b):
    x = b.choose(ANY, min_rank=1)
    if x is None:
        return None
    a = _axis(b, x.rank)
    shape = list(x.shape)
    shape[a] = b.dim()
    y = b.operand(tuple(shape), x.dtype, x.exact)
    parts = [x, y] if b.rng.random() < 0.5 else [y, x]
    shape[a] += x.shape[a]
    if not _fits(shape):
        return None
    return b.emit(f"tf.concat([{parts[0].name}, {parts[1].name}], axis={a})", tuple(shape), x.dtype,
                  x.exact and y.exact, parts)


@row("stack", "movement", 0.5, ANY)
def _stack(b):
    x = b.choose(ANY)
    if x is None or x.rank >= 4 or x.size > 120:
        return None
    y = b.operand(x.shape, x.dtype, x.exact)
    a = int(b.rng.integers(-x.rank - 1, x.rank + 1))
    shape = list(x.shape)
    shape.insert(a % (x.rank + 1), 2)
    return b.emit(f"tf.stack([{x.name}, {y.name}], axis={a})", tuple(shape), x.dtype, x.exact and y.exact, [x, y])


@row("slice", "movement", 0.8, ANY)
def _slice(b):
    x = b.choose(ANY, min_rank=1)
    if x is None:
        return None
    begin = [int(b.rng.integers(0, d + 1)) for d in x.shape]
    size = [int(b.rng.integers(0, d - s + 1)) if b.rng.random() < 0.8 else -1 for d, s in zip(x.shape, begin)]
    shape = tuple(d - s if n == -1 else n for d, s, n in zip(x.shape, begin, size))
    return b.emit(f"tf.slice({x.name}, {begin}, {size})", shape, x.dtype, x.exact, [x])


def _slice_spec(b, d: int):
    """(source, length or None for a dropped dim) of one dim's Python index."""
    if d > 0 and b.rng.random() < 0.12:
        i = int(b.rng.integers(-d, d))
        return str(i), None
    step = int(b.rng.choice([1, 1, 2, 3, -1, -2]))
    start = None if b.rng.random() < 0.4 else int(b.rng.integers(-d - 2, d + 3))
    stop = None if b.rng.random() < 0.4 else int(b.rng.integers(-d - 2, d + 3))
    n = len(range(*slice(start, stop, step).indices(d)))
    text = f"{'' if start is None else start}:{'' if stop is None else stop}" + ("" if step == 1 else f":{step}")
    return text, n


@row("strided_slice", "movement", 1.0, ANY)
def _strided_slice(b):
    x = b.choose(ANY, min_rank=1)
    if x is None:
        return None
    specs, shape = [], []
    for d in x.shape[:int(b.rng.integers(1, x.rank + 1))]:
        text, n = _slice_spec(b, d)
        specs.append(text)
        if n is not None:
            shape.append(n)
    shape += x.shape[len(specs):]
    if b.rng.random() < 0.15 and len(shape) < 4:
        pos = int(b.rng.integers(len(specs) + 1))
        specs.insert(pos, "tf.newaxis")
        shape.insert(sum(1 for s in specs[:pos] if ":" in s), 1)
    return b.emit(f"{x.name}[{', '.join(specs)}]", tuple(shape), x.dtype, x.exact, [x])


@row("reverse", "movement", 0.6, ANY)
def _reverse(b):
    x = b.choose(ANY, min_rank=1)
    if x is None:
        return None
    axes = [int(a) for a in b.rng.choice(x.rank, int(b.rng.integers(1, x.rank + 1)), replace=False)]
    return b.emit(f"tf.reverse({x.name}, axis={axes})", x.shape, x.dtype, x.exact, [x])


@row("tile", "movement", 0.6, ANY)
def _tile(b):
    x = b.choose(ANY, min_rank=1)
    if x is None:
        return None
    mult = [int(b.rng.choice([0, 1, 1, 2, 3])) if b.rng.random() < 0.1 else int(b.rng.choice([1, 2, 3]))
            for _ in x.shape]
    shape = tuple(d * m for d, m in zip(x.shape, mult))
    if not _fits(shape):
        return None
    return b.emit(f"tf.tile({x.name}, {mult})", shape, x.dtype, x.exact, [x])


@row("pad", "movement", 0.8, ANY)
def _pad(b):
    x = b.choose(ANY, min_rank=1)
    if x is None:
        return None
    mode = str(b.rng.choice(["CONSTANT", "CONSTANT", "REFLECT", "SYMMETRIC"]))
    limit = {"CONSTANT": 2, "REFLECT": None, "SYMMETRIC": None}[mode]
    pads = []
    for d in x.shape:
        hi = limit if limit is not None else (d - 1 if mode == "REFLECT" else d)
        hi = max(0, min(hi, 2))
        pads.append([int(b.rng.integers(0, hi + 1)), int(b.rng.integers(0, hi + 1))])
    shape = tuple(d + lo + hi for d, (lo, hi) in zip(x.shape, pads))
    if not _fits(shape):
        return None
    extra = ""
    if mode == "CONSTANT" and b.rng.random() < 0.5 and x.dtype != "bool":
        extra = f", constant_values={int(b.rng.integers(-3, 4))}"
    return b.emit(f"tf.pad({x.name}, {pads}, mode=\"{mode}\"{extra})", shape, x.dtype, x.exact, [x])


@row("gather", "indexing", 1.0, ANY)
def _gather(b):
    x = b.choose(ANY, min_rank=1)
    if x is None:
        return None
    a = _axis(b, x.rank)
    d = x.shape[a]
    ishape = tuple(b.dim() for _ in range(int(b.rng.choice([0, 1, 1, 2]))))
    n = math.prod(ishape)
    idx = b.rng.integers(0, max(d, 1), n)
    if d == 0 or b.rng.random() < 0.05:  # out of range: TF eager raises InvalidArgumentError
        idx = np.where(b.rng.random(n) < 0.5, idx, b.rng.choice([-1, d, d + 3], n))
    idx = idx.astype(np.int32).reshape(ishape)
    shape = x.shape[:a % x.rank] + ishape + x.shape[a % x.rank + 1:]
    if not _fits(shape) or len(shape) > 5:
        return None
    if b.rng.random() < 0.5 and len(b.inputs) < 3:
        ind = b.add_input_data(idx)
    else:
        from tests.fuzz.generator import constant_source
        ind = type(x)(constant_source(idx), ishape, "int32", True)
    return b.emit(f"tf.gather({x.name}, {ind.name}, axis={a})", shape, x.dtype, x.exact, [x, ind])


@row("broadcast_to", "movement", 0.6, ANY)
def _broadcast_to(b):
    x = b.choose(ANY)
    if x is None or x.rank >= 4:
        return None
    lead = tuple(b.dim() for _ in range(int(b.rng.integers(0, 4 - x.rank))))
    shape = lead + tuple(b.dim() if d == 1 and b.rng.random() < 0.6 else d for d in x.shape)
    if not _fits(shape):
        return None
    return b.emit(f"tf.broadcast_to({x.name}, {list(shape)})", shape, x.dtype, x.exact, [x])


@row("one_hot", "indexing", 0.4, ("int32",))
def _one_hot(b):
    x = b.choose(("int32",))
    if x is None or x.rank >= 3:
        return None
    depth = int(b.rng.integers(1, 5))
    dtype = str(b.rng.choice(["float32", "int32", "float64"]))
    shape = x.shape + (depth,)
    if not _fits(shape):
        return None
    return b.emit(f"tf.one_hot({x.name}, {depth}, on_value=3, off_value=-1, dtype=tf.{dtype})", shape, dtype,
                  True, [x])


@row("split", "movement", 0.5, ANY)
def _split(b):
    x = b.choose(ANY, min_rank=1)
    if x is None:
        return None
    a = _axis(b, x.rank)
    d = x.shape[a]
    ks = [k for k in (1, 2, 3) if d % k == 0] if d else [1]
    k = int(b.rng.choice(ks))
    j = int(b.rng.integers(k))
    if b.rng.random() < 0.3 and d:
        shape = x.shape[:a % x.rank] + x.shape[a % x.rank + 1:]
        return b.emit(f"tf.unstack({x.name}, axis={a})[{int(b.rng.integers(d))}]", shape, x.dtype, x.exact, [x])
    shape = list(x.shape)
    shape[a] = d // k
    return b.emit(f"tf.split({x.name}, {k}, axis={a})[{j}]", tuple(shape), x.dtype, x.exact, [x])
