"""Optimizer update ops (ResourceApplyGradientDescent, ResourceApplyMomentum,
ResourceApplyKerasMomentum, ResourceApplyAdam) as pure functions of variable values.

The contract. In TF these ops take resource handles and update the variables in place; in a
compiled cluster the variable reads and writes stay in TensorFlow. So the lowering sees each
resource input as the variable's current VALUE: the cluster's ``InputSpec`` for that input
has the variable's dtype and dims (not DT_RESOURCE). The rule returns the NEW values as the
node's outputs, one per updated variable in input order: ``node:0`` is the new ``var``, then
``node:1`` the new ``accum`` (Momentum) or ``node:1``/``node:2`` the new ``m``/``v`` (Adam).
TF's op has no outputs, so these output numbers exist only in the lowered cluster; whoever
rewrites the graph assigns them back to the variables (AssignVariableOp) after the cluster.
``use_locking`` has no meaning in a pure function and is ignored.

The math is TF's CPU kernels' (training_ops.cc), with the same operation order, in the
variable's type (scalars are rank-0 inputs broadcast to the variable):
- GradientDescent: ``var - delta * alpha``.
- Momentum: ``accum = accum * momentum + grad``; ``var -= lr * accum``, or with
  ``use_nesterov`` ``var -= grad * lr + accum * momentum * lr``.
- KerasMomentum: ``accum = accum * momentum - grad * lr``; ``var += accum``, or with
  ``use_nesterov`` ``var += accum * momentum - grad * lr``.
- Adam: ``alpha = lr * sqrt(1 - beta2_power) / (1 - beta1_power)``;
  ``m += (g - m) * (1 - beta1)``; ``v += (g*g - v) * (1 - beta2)``;
  ``var -= m * alpha / (sqrt(v) + epsilon)``, or with ``use_nesterov``
  ``var -= (g * (1 - beta1) + beta1 * m) * alpha / (sqrt(v) + epsilon)``.
"""

from __future__ import annotations

from typing import Sequence

from hlo.builder import Value
from hlo.lowering.context import LoweringContext
from hlo.lowering.registry import register_lowering
from hlo.lowering.tf_types import FLOATS
from hlo.opcodes import Opcode


class _Math:
    """Elementwise arithmetic on values (rank-0 operands broadcast) in one element type."""

    def __init__(self, ctx: LoweringContext):
        self.ctx = ctx

    def add(self, x: Value, y: Value) -> Value:
        return self.ctx.binary(Opcode.ADD, x, y)

    def sub(self, x: Value, y: Value) -> Value:
        return self.ctx.binary(Opcode.SUBTRACT, x, y)

    def mul(self, x: Value, y: Value) -> Value:
        return self.ctx.binary(Opcode.MULTIPLY, x, y)

    def div(self, x: Value, y: Value) -> Value:
        return self.ctx.binary(Opcode.DIVIDE, x, y)

    def one(self, like: Value) -> Value:
        return self.ctx.scalar(1, self.ctx.dtype(like))


def _check(ctx: LoweringContext, var: Value, *tensors: Value, scalars: Sequence[Value] = ()) -> _Math:
    for t in tensors:
        if ctx.dims(t) != ctx.dims(var):
            raise ctx.error(f"var and its update tensors must have the same shape, got {list(ctx.dims(var))} "
                            f"and {list(ctx.dims(t))}")
    for s in scalars:
        if ctx.dims(s):
            raise ctx.error(f"hyperparameters must be scalars, got shape {list(ctx.dims(s))}")
    return _Math(ctx)


@register_lowering("ResourceApplyGradientDescent", dtypes=FLOATS)
def apply_gradient_descent(ctx: LoweringContext) -> list[Value]:
    var, alpha, delta = ctx.inputs
    m = _check(ctx, var, delta, scalars=(alpha,))
    return [m.sub(var, m.mul(delta, alpha))]


@register_lowering("ResourceApplyMomentum", dtypes=FLOATS)
def apply_momentum(ctx: LoweringContext) -> list[Value]:
    var, accum, lr, grad, momentum = ctx.inputs
    m = _check(ctx, var, accum, grad, scalars=(lr, momentum))
    accum = m.add(m.mul(accum, momentum), grad)
    if ctx.attr_bool("use_nesterov", False):
        step = m.add(m.mul(grad, lr), m.mul(m.mul(accum, momentum), lr))
    else:
        step = m.mul(lr, accum)
    return [m.sub(var, step), accum]


@register_lowering("ResourceApplyKerasMomentum", dtypes=FLOATS)
def apply_keras_momentum(ctx: LoweringContext) -> list[Value]:
    var, accum, lr, grad, momentum = ctx.inputs
    m = _check(ctx, var, accum, grad, scalars=(lr, momentum))
    accum = m.sub(m.mul(accum, momentum), m.mul(grad, lr))
    if ctx.attr_bool("use_nesterov", False):
        step = m.sub(m.mul(accum, momentum), m.mul(grad, lr))
    else:
        step = accum
    return [m.add(var, step), accum]


@register_lowering("ResourceApplyAdam", dtypes=FLOATS)
def apply_adam(ctx: LoweringContext) -> list[Value]:
    var, mom, vel, beta1_power, beta2_power, lr, beta1, beta2, epsilon, grad = ctx.inputs
    m = _check(ctx, var, mom, vel, grad, scalars=(beta1_power, beta2_power, lr, beta1, beta2, epsilon))
    one = m.one(var)
    alpha = m.div(m.mul(lr, ctx.b.sqrt(m.sub(one, beta2_power))), m.sub(one, beta1_power))
    mom = m.add(mom, m.mul(m.sub(grad, mom), m.sub(one, beta1)))
    vel = m.add(vel, m.mul(m.sub(m.mul(grad, grad), vel), m.sub(one, beta2)))
    denom = m.add(ctx.b.sqrt(vel), epsilon)
    if ctx.attr_bool("use_nesterov", False):
        numer = m.mul(m.add(m.mul(grad, m.sub(one, beta1)), m.mul(beta1, mom)), alpha)
    else:
        numer = m.mul(mom, alpha)
    return [m.sub(var, m.div(numer, denom)), mom, vel]
