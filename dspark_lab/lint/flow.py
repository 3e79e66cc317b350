"""Where a value lives, followed through local names within one function: DEVICE (a tensor on the
GPU), HOST (a pageable CPU tensor), PINNED (page-locked host memory), PYTHON (a literal: a number,
a list), or None
(unknown: an argument, an attribute, a call into other code). The finder asks it before it calls a
line a sync: `.item()` of a host tensor is not one, `.to(dev, non_blocking=True)` of `torch.tensor(x)`
is a pageable copy.

A device tensor made from host values (`.to(dev)` / `.cuda()` of a host tensor, `torch.tensor(<host
values>, device=)`) is also marked host-sourced, and so is a mask computed from one: the host holds
the same values, so it could hold the mask (`host_sourced`).

Names say where a value lives when nothing else does (the convention the gallery and SGLang follow):
`*_cpu`, `host_*` and `*pageable*` are host memory, `*pinned*` is pinned; `*mask*` is a boolean mask.
"""
from __future__ import annotations

import ast
import re
from typing import Optional

DEVICE, HOST, PINNED, PYTHON = "device", "host", "pinned", "python"
_HOST_SIDE = (HOST, PINNED, PYTHON)
_HOST_NAME = re.compile(r"(^|_)(cpu|host|pageable)(_|$)|pageable")
_PINNED_NAME = re.compile(r"pinned|(^|_)pin(_|$)")
_MASK_NAME = re.compile(r"mask")
# torch factories: where they put the tensor is their device= (and pin_memory=) keyword.
FROM_DATA = {"tensor", "as_tensor", "asarray"}
FACTORIES = FROM_DATA | {"zeros", "ones", "empty", "full", "arange", "linspace", "rand", "randn", "randint",
                         "eye", "empty_strided", "randperm"}
_HOST_RESULT_METHODS = {"cpu", "numpy", "tolist", "item"}
_MASK_METHODS = {"bool", "isnan", "isinf", "isfinite", "eq", "ne", "lt", "le", "gt", "ge", "logical_and",
                 "logical_or", "logical_not", "isin"}


def name_of(node: ast.AST) -> Optional[str]:
    """The identifier a Name or an Attribute ends with (`s.seq_lens_cpu` -> "seq_lens_cpu")."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    return None


def is_torch(node: ast.AST, *names: str) -> bool:
    """`torch.X` (or `torch.cuda.X`) for X in names."""
    return (isinstance(node, ast.Attribute) and node.attr in names and isinstance(node.value, (ast.Name, ast.Attribute))
            and (getattr(node.value, "id", None) == "torch" or getattr(node.value, "attr", None) == "cuda"))


def keyword(call: ast.Call, name: str) -> Optional[ast.AST]:
    return next((k.value for k in call.keywords if k.arg == name), None)


def is_cpu_literal(node: Optional[ast.AST]) -> bool:
    """"cpu", or torch.device("cpu")."""
    if isinstance(node, ast.Constant):
        return isinstance(node.value, str) and node.value.split(":")[0] == "cpu"
    if isinstance(node, ast.Call) and is_torch(node.func, "device") and node.args:
        return is_cpu_literal(node.args[0])
    return False


DTYPES = {"bool", "uint8", "int8", "int16", "short", "int32", "int", "int64", "long", "float16", "half", "bfloat16",
          "float32", "float", "float64", "double", "complex64", "complex128"}


def is_dtype(node: Optional[ast.AST]) -> bool:
    """torch.<dtype>, or a name that says it is one (`dtype`, `*_dtype`): `.to(dtype)` copies nothing across."""
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "torch":
        return node.attr in DTYPES
    return isinstance(node, ast.Name) and (node.id == "dtype" or node.id.endswith("_dtype"))


def is_true(node: Optional[ast.AST]) -> bool:
    """A keyword given a value that is not the constant False/None (pin_memory=pinned counts)."""
    return node is not None and not (isinstance(node, ast.Constant) and node.value in (False, None, 0))


class Flow:
    """The origins of a function's local names, updated statement by statement in source order."""

    def __init__(self) -> None:
        self.names: dict[str, Optional[str]] = {}
        self.masks: set[str] = set()
        self.host_sourced: set[str] = set()  # device tensors made from host values, and masks of them

    def assign(self, target: ast.AST, value: ast.AST) -> None:
        if isinstance(target, ast.Name):
            self.names[target.id] = self.origin(value)
            (self.host_sourced.add if self.is_host_sourced(value) else self.host_sourced.discard)(target.id)
            if self.is_mask(value):
                self.masks.add(target.id)
            else:
                self.masks.discard(target.id)
        elif isinstance(target, (ast.Tuple, ast.List)):
            for t in target.elts:  # a, b = ...: each gets the value's origin, no mask
                if isinstance(t, ast.Name):
                    self.names[t.id] = self.origin(value)
                    self.masks.discard(t.id)

    def hint(self, node: ast.AST) -> Optional[str]:
        n = name_of(node)
        if n is None:
            return None
        if isinstance(node, ast.Name) and self.names.get(n) is not None:
            return self.names[n]  # what the function assigned it (an argument's name may still hint)
        if _PINNED_NAME.search(n):
            return PINNED
        return HOST if _HOST_NAME.search(n) else None

    def origin(self, node: ast.AST) -> Optional[str]:
        if isinstance(node, (ast.Constant, ast.List, ast.Tuple, ast.ListComp, ast.Dict, ast.JoinedStr)):
            return PYTHON
        if isinstance(node, (ast.Name, ast.Attribute)):
            return self.hint(node)
        if isinstance(node, ast.Call):
            return self._call_origin(node)
        if isinstance(node, ast.Subscript):
            return _new_tensor(self.origin(node.value))
        parts = [n for n in ast.iter_child_nodes(node) if isinstance(n, ast.expr)]
        return combine(self.origin(p) for p in parts)

    def _call_origin(self, call: ast.Call) -> Optional[str]:
        f = call.func
        if is_torch(f, *FACTORIES) or is_torch(f, "from_numpy"):
            return factory_origin(call)
        if isinstance(f, ast.Attribute):
            base = self.origin(f.value)
            if f.attr in _HOST_RESULT_METHODS:
                return HOST
            if f.attr == "cuda":
                return DEVICE
            if f.attr == "pin_memory":
                return PINNED
            if f.attr == "to":
                return self._to_origin(call, base)
            if f.attr.endswith("_") or f.attr in ("view", "reshape", "squeeze", "unsqueeze"):
                return base  # in place or a view: the same memory
            if isinstance(f.value, ast.Name) and f.value.id == "torch":
                return combine(self.origin(a) for a in call.args)
            return _new_tensor(base)
        return None  # a call into other code: unknown

    def _to_origin(self, call: ast.Call, base: Optional[str]) -> Optional[str]:
        dev = keyword(call, "device") or (call.args[0] if call.args else None)
        if dev is None or (isinstance(dev, ast.Attribute) and getattr(dev.value, "id", None) == "torch"):
            return base  # .to(torch.int32): a dtype, same place
        return HOST if is_cpu_literal(dev) else DEVICE

    def is_host_sourced(self, node: ast.AST) -> bool:
        """A device value made from host values (a copy up, a factory given host data), or a mask or
        view computed from such values and no other device value."""
        if isinstance(node, ast.Name):
            return node.id in self.host_sourced
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in ("to", "cuda"):
            moved = self.origin(node) == DEVICE and self.origin(node.func.value) in _HOST_SIDE
            return moved or (node.func.attr == "to" and self.is_host_sourced(node.func.value) and self.origin(node) == DEVICE)
        if isinstance(node, ast.Call) and is_torch(node.func, *FROM_DATA):
            return factory_origin(node) == DEVICE and bool(node.args) and self.origin(node.args[0]) in _HOST_SIDE
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in _MASK_METHODS:
            return self._only_host_sourced([node.func.value] + list(node.args))
        if isinstance(node, ast.Compare):
            return self._only_host_sourced([node.left] + node.comparators)
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Invert):
            return self.is_host_sourced(node.operand)
        if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.BitAnd, ast.BitOr, ast.BitXor)):
            return self._only_host_sourced([node.left, node.right])
        return False

    def _only_host_sourced(self, parts: list) -> bool:
        """Some part is host-sourced and every other part is too, or a host or Python value."""
        sourced = [self.is_host_sourced(p) for p in parts]
        return any(sourced) and all(s or self.origin(p) in _HOST_SIDE for p, s in zip(parts, sourced))

    def is_mask(self, node: ast.AST) -> bool:
        if isinstance(node, ast.Compare) and not any(isinstance(o, (ast.In, ast.NotIn, ast.Is, ast.IsNot)) for o in node.ops):
            return self.origin(node) == DEVICE  # `device == "cuda"` is a Python bool
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Invert):
            return self.is_mask(node.operand)
        if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.BitAnd, ast.BitOr, ast.BitXor)):
            return self.is_mask(node.left) or self.is_mask(node.right)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in _MASK_METHODS:
            return self.origin(node.func.value) == DEVICE  # pandas' .isin() and .eq() are masks of frames
        if isinstance(node, ast.Name) and node.id in self.masks:
            return True
        n = name_of(node)
        return bool(n and _MASK_NAME.search(n))


def factory_origin(call: ast.Call) -> str:
    """Where a torch factory puts its tensor: device= (not "cpu"), pin_memory=, else pageable host."""
    dev = keyword(call, "device")
    if dev is not None and not is_cpu_literal(dev):
        return DEVICE
    return PINNED if is_true(keyword(call, "pin_memory")) else HOST


def _new_tensor(base: Optional[str]) -> Optional[str]:
    """An op's result lives where its input does, except that a new tensor made from pinned memory is pageable."""
    return HOST if base == PINNED else base


def combine(origins) -> Optional[str]:
    """An expression of several values: on the device if any is; else host if any is (a host tensor
    combined with a device one would fail, so the unknown parts are Python numbers or host too)."""
    seen = list(origins)
    if DEVICE in seen:
        return DEVICE
    if any(o in (HOST, PINNED) for o in seen):
        return HOST
    return PYTHON if seen and all(o == PYTHON for o in seen) else None
