"""phobos kernels as torch operators: `torch.library` custom ops, torch.compile, autograd.

    linear_gelu = phobos.torch.op(phobos.load("k.phk", kernel="linear_gelu"), name="demo::linear_gelu")
    Y = linear_gelu(X, W, b)                 # eager, inside torch.compile(fullgraph=True), in CUDA graphs

A phobos kernel writes its outputs in place; the operator is functional: the tensors the kernel
stores to (or those named by `outputs=`) are allocated by torch and returned, the others are the
operator's arguments, in the kernel's order. The fake (meta) implementation that torch.compile
traces with is derived from the kernel's signature: every output dimension is a dimension of an
input tensor (or pinned by `Kernel.bind(dims=...)`), every dtype is the declared one. CPU tensors
run through the reference interpreter, CUDA tensors through the compiled kernel on torch's current
stream (docs/torch.md, docs/python.md).

Autograd pairs the forward with backward operators by name (`backward=`): a backward kernel's
parameters are the forward's tensors and scalars by their names, `grad_<out>` for the gradient of
an output, and what earlier backward operators produced; what it stores is named `grad_<input>`.
torch is an optional dependency (third_party/requirements-torch.in): importing this module without
it is a one-line phobos.Error.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass

from common import dtypes
from common.errors import ArrayError, Error
from compiler.api.kernel import Kernel
from compiler.frontend.walk import read_tensors

try:
    import torch
except ImportError:  # pragma: no cover - the integration's tests skip without torch
    _msg = "phobos.torch needs torch, which is not installed here (see docs/torch.md)"
    raise Error(f"error: {_msg}", _msg) from None

__all__ = ["Op", "op"]

# every storage dtype of common/dtypes.py this torch has (torch.uint32 came with torch 2.3)
_TORCH_DTYPES = {name: getattr(torch, attr) for name in dtypes.names(storage=True)
                 if hasattr(torch, attr := dtypes.get(name).torch.removeprefix("torch."))}
_SCHEMA_SCALARS = {"f32": "float", "i32": "int", "i64": "int", "u32": "int", "bool": "bool"}
_GRAD = "grad_"

_registry: dict[str, Op] = {}  # qualified name -> operator, so that a second registration is refused
_libraries: dict[str, torch.library.Library] = {}  # kept alive: dropping one unregisters its ops
_lock = threading.Lock()


def _fail(message: str) -> Error:
    return Error(f"error: {message}", message)


@dataclass(frozen=True)
class _Signature:
    """What the operator takes and returns, derived once from the kernel."""

    params: tuple[str, ...]  # the kernel's parameters, in order
    inputs: tuple[str, ...]  # the operator's arguments: the kernel's parameters less the outputs
    outputs: tuple[str, ...]
    tensor_types: dict[str, str]
    scalar_types: dict[str, str]
    # per output: per axis, an int (a fixed or pinned size) or (input tensor, its axis)
    shapes: dict[str, tuple[int | tuple[str, int], ...]]
    zeroed: frozenset[str]  # outputs the kernel also reads: they start as zeros, not garbage

    def schema(self, op_name: str) -> str:
        args = [f"Tensor {n}" if n in self.tensor_types else f"{_SCHEMA_SCALARS[self.scalar_types[n]]} {n}"
                for n in self.inputs]
        result = "Tensor" if len(self.outputs) == 1 else "(" + ", ".join(["Tensor"] * len(self.outputs)) + ")"
        return f"{op_name}({', '.join(args)}) -> {result}"


def _signature(kernel: Kernel, outputs: Sequence[str] | None) -> _Signature:
    ir_kernel = kernel._ir  # the checked kernel: its declared shapes and what it reads
    tensors = kernel.tensors
    outs = tuple(kernel.outputs if outputs is None else outputs)
    for name in outs:
        if name not in tensors:
            raise _fail(f"outputs: {name} is not a tensor parameter of kernel {kernel.name} "
                        f"(its tensors: {', '.join(tensors)})")
    if not outs:
        raise _fail(f"kernel {kernel.name} stores to no tensor: a torch op needs at least one output")
    inputs = tuple(n for n in kernel.parameters if n not in outs)
    for name, dtype in kernel.scalars.items():
        if dtype not in _SCHEMA_SCALARS:
            raise _fail(f"scalar {name}: {dtype} has no torch schema type")
    declared = {p.name: p.dims for p in ir_kernel.tensors}
    where: dict[str, tuple[str, int]] = {}
    for name in inputs:
        for axis, dim in enumerate(declared.get(name, ())):
            if isinstance(dim, str):
                where.setdefault(dim, (name, axis))
    pinned = kernel.dims
    shapes = {}
    for name in outs:
        axes = []
        for dim in declared[name]:
            if not isinstance(dim, str):
                axes.append(int(dim))
            elif dim in pinned:
                axes.append(pinned[dim])
            elif dim in where:
                axes.append(where[dim])
            else:
                raise _fail(f"output {name}: dimension {dim} is in no input tensor; pin it with "
                            f"kernel.bind(dims={{'{dim}': ...}})")
        shapes[name] = tuple(axes)
    read = set(read_tensors(ir_kernel))
    return _Signature(kernel.parameters, inputs, outs, tensors, kernel.scalars, shapes,
                      frozenset(n for n in outs if n in read))


class Op:
    """A registered operator: call it like the torch op (`torch.ops.<ns>.<name>`) it stands for."""

    def __init__(self, kernel: Kernel, qualname: str, signature: _Signature):
        self.kernel = kernel
        self.qualname = qualname
        self._sig = signature
        namespace, name = qualname.split("::")
        self.torch_op = getattr(getattr(torch.ops, namespace), name).default
        self.backward: tuple[Op, ...] = ()

    @property
    def inputs(self) -> tuple[str, ...]:
        return self._sig.inputs

    @property
    def outputs(self) -> tuple[str, ...]:
        return self._sig.outputs

    def __call__(self, *args, **kwargs):
        return self.torch_op(*args, **kwargs)

    def __repr__(self) -> str:
        return f"<phobos.torch.Op {self.qualname}({', '.join(self.inputs)}) -> {', '.join(self.outputs)}>"

    # ---- the implementations torch dispatches to ------------------------------------------------

    def _output_shape(self, name: str, args: dict) -> list:
        return [axis if isinstance(axis, int) else args[axis[0]].shape[axis[1]]
                for axis in self._sig.shapes[name]]

    def _check_inputs(self, args: dict) -> None:
        declared = {p.name: p.dims for p in self.kernel._ir.tensors}
        for name, value in args.items():
            if name not in self._sig.tensor_types:
                continue
            want = _TORCH_DTYPES[self._sig.tensor_types[name]]
            if not isinstance(value, torch.Tensor):
                raise ArrayError(name, f"expected a torch tensor, got {type(value).__name__}")
            if value.dtype != want:
                expected = self._sig.tensor_types[name]
                raise ArrayError(name, f"the kernel expects {expected}, got {value.dtype}")
            if value.dim() != len(declared[name]):
                raise ArrayError(name, f"expected {len(declared[name])} dimensions, "
                                       f"got shape {tuple(value.shape)}")

    def _fake(self, *args):
        named = dict(zip(self._sig.inputs, args, strict=True))
        self._check_inputs(named)
        device = self._device(named)
        made = [torch.empty(self._output_shape(n, named), dtype=_TORCH_DTYPES[self._sig.tensor_types[n]],
                            device=device) for n in self._sig.outputs]
        return made[0] if len(made) == 1 else tuple(made)

    def _run(self, *args):
        named = dict(zip(self._sig.inputs, args, strict=True))
        self._check_inputs(named)
        device = self._device(named)
        values = {}
        for name in self._sig.params:
            if name in self._sig.outputs:
                alloc = torch.zeros if name in self._sig.zeroed else torch.empty
                values[name] = alloc(self._output_shape(name, named),
                                     dtype=_TORCH_DTYPES[self._sig.tensor_types[name]], device=device)
            elif name in self._sig.tensor_types:
                # detach: autograd is the registered backward's; contiguous: a no-op for what models pass
                values[name] = named[name].detach().contiguous()
            else:
                values[name] = named[name]
        self.kernel(**values)
        made = [values[n] for n in self._sig.outputs]
        return made[0] if len(made) == 1 else tuple(made)

    def _device(self, named: dict):
        return next(v.device for n, v in named.items() if n in self._sig.tensor_types)


def op(kernel: Kernel, name: str, *, outputs: Sequence[str] | None = None,
       backward: Op | Sequence[Op] | None = None) -> Op:
    """Register `kernel` as the torch operator `name` ("namespace::op", or "op" in namespace
    phobos) and return it. `outputs` names the tensors the operator allocates and returns (default:
    those the kernel stores to); `backward` the operators that compute its gradients, in order."""
    if not isinstance(kernel, Kernel):
        raise _fail(f"phobos.torch.op takes a phobos.Kernel (phobos.load(...)), got {type(kernel).__name__}")
    qualname = name if "::" in name else f"phobos::{name}"
    namespace, _, op_name = qualname.partition("::")
    if not (namespace.isidentifier() and op_name.isidentifier()):
        raise _fail(f"op name {name!r} must be 'namespace::name' of two identifiers")
    signature = _signature(kernel, outputs)
    steps = () if backward is None else (backward,) if isinstance(backward, Op) else tuple(backward)
    plan = _backward_plan(signature, steps) if steps else None
    with _lock:
        if qualname in _registry:
            first = _registry[qualname].kernel.name
            raise _fail(f"torch op {qualname} is already registered (kernel {first}); "
                        "give this one another name")
        library = _libraries.get(namespace)
        if library is None:
            library = _libraries[namespace] = torch.library.Library(namespace, "FRAGMENT")
        try:
            library.define(signature.schema(op_name))
        except RuntimeError as err:  # defined by someone else in this process (another library)
            raise _fail(f"torch op {qualname} cannot be registered: {str(err).splitlines()[0]}") from None
        registered = Op(kernel, qualname, signature)
        library.impl(op_name, registered._run, "CPU")
        library.impl(op_name, registered._run, "CUDA")
        torch.library.register_fake(qualname, registered._fake, lib=library)
        if plan is not None:
            registered.backward = steps
            torch.library.register_autograd(qualname, plan.backward, setup_context=plan.setup, lib=library)
        _registry[qualname] = registered
    return registered


# ---- autograd: the forward's gradients from backward operators, by name --------------------------


@dataclass(frozen=True)
class _BackwardPlan:
    """Which forward values the backward steps read (saved by `setup`), and how `backward` runs them."""

    forward: _Signature
    steps: tuple[Op, ...]
    saved: tuple[str, ...]  # forward tensors (inputs or outputs) some step reads
    scalars: tuple[str, ...]  # forward scalars some step reads

    def setup(self, ctx, inputs, output) -> None:
        named = dict(zip(self.forward.inputs, inputs, strict=True))
        outs = output if isinstance(output, tuple) else (output,)
        named.update(zip(self.forward.outputs, outs, strict=True))
        ctx.save_for_backward(*[named[n] for n in self.saved])
        ctx.phobos_scalars = {n: named[n] for n in self.scalars}

    def backward(self, ctx, *grads):
        env = dict(zip(self.saved, ctx.saved_tensors, strict=True))
        env.update(ctx.phobos_scalars)
        env.update((_GRAD + n, g) for n, g in zip(self.forward.outputs, grads, strict=True))
        for step in self.steps:
            made = step(*[env[n] for n in step.inputs])
            env.update(zip(step.outputs, made if isinstance(made, tuple) else (made,), strict=True))
        tensors = self.forward.tensor_types
        return tuple(env.get(_GRAD + n) if n in tensors else None for n in self.forward.inputs)


def _backward_plan(forward: _Signature, steps: tuple[Op, ...]) -> _BackwardPlan:
    """Checks, before anything is registered, that every step's input has a source and that the
    steps produce gradients of the forward's tensor inputs only."""
    known = {*forward.inputs, *forward.outputs, *(_GRAD + n for n in forward.outputs)}
    saved, scalars, grads = [], [], []
    for step in steps:
        if not isinstance(step, Op):
            raise _fail(f"backward: expected phobos.torch ops, got {type(step).__name__}")
        for name in step.inputs:
            if name not in known:
                raise _fail(f"backward op {step.qualname}: its input {name} is no tensor or scalar of the "
                            f"forward, no grad_<output> and made by no earlier backward op")
            source_is_forward = name in forward.inputs or name in forward.outputs
            if source_is_forward and name in forward.scalar_types and name not in scalars:
                scalars.append(name)
            elif source_is_forward and name in forward.tensor_types and name not in saved:
                saved.append(name)
        for name in step.outputs:
            base = name.removeprefix(_GRAD)
            if not name.startswith(_GRAD) and name not in known:
                known.add(name)  # an intermediate for later steps (grad_Z of a pre-activation)
                continue
            if name.startswith(_GRAD) and base in forward.inputs and base in forward.scalar_types:
                raise _fail(f"backward op {step.qualname}: {name} would be the gradient of scalar {base}")
            known.add(name)
            grads.append(name)
    if not any(g.removeprefix(_GRAD) in forward.tensor_types and g.removeprefix(_GRAD) in forward.inputs
               for g in grads):
        wanted = ", ".join(_GRAD + n for n in forward.inputs if n in forward.tensor_types)
        raise _fail(f"backward: no op stores a gradient of a forward input (expected one of {wanted})")
    return _BackwardPlan(forward, steps, tuple(saved), tuple(scalars))
