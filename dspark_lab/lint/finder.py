"""The rules applied to one module's AST: each function's statements in source order, with the local
names' origins (flow.py) known at each line. Yields (line, col, rule, function) for every sync shape."""
from __future__ import annotations

import ast
from typing import Iterator, Optional

from dspark_lab.lint import flow as F
from dspark_lab.lint.flow import DEVICE, HOST, PINNED, PYTHON, Flow

REDUCTIONS = {"any", "all", "sum", "max", "min", "mean", "prod", "amax", "amin", "argmax", "argmin",
              "count_nonzero", "norm", "std", "var", "median"}
DATA_DEPENDENT = {"nonzero", "argwhere", "masked_select", "unique", "unique_consecutive"}
NOT_TENSOR_MODULES = {"np", "numpy", "pd", "pandas", "math", "statistics", "builtins"}
NUMBER_KEYWORDS = {"alpha", "value", "fill_value"}
_HOST_SIDE = (HOST, PINNED, PYTHON)
Raw = tuple  # (line, col, rule, function)


def imports_torch(tree: ast.Module) -> bool:
    """The module imports torch somewhere (a module that never does holds no tensors of its own)."""
    for n in ast.walk(tree):
        if isinstance(n, ast.Import) and any(a.name.split(".")[0] == "torch" for a in n.names):
            return True
        if isinstance(n, ast.ImportFrom) and (n.module or "").split(".")[0] == "torch" and not n.level:
            return True
    return False


def find(tree: ast.Module) -> list[Raw]:
    """Every sync shape in the module, in source order, each (line, col, rule, function); none in a
    module that never imports torch (pandas' `df[df.x == y]` and `float(s.sum())` are not syncs)."""
    out: list[Raw] = []
    if not imports_torch(tree):
        return out
    _Walker(out, "<module>", Flow()).body(tree.body)
    return sorted(set(out))


class _Walker:
    """One function's (or the module's) statements, in order."""

    def __init__(self, out: list, function: str, flow: Flow) -> None:
        self.out, self.function, self.flow = out, function, flow

    def body(self, stmts: list) -> None:
        for s in stmts:
            self.statement(s)

    def statement(self, s: ast.stmt) -> None:
        if isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef)):
            inner = Flow()
            inner.names, inner.masks = dict(self.flow.names), set(self.flow.masks)  # a closure sees the outer names
            for a in s.args.args + s.args.kwonlyargs:
                inner.names[a.arg] = None
            _Walker(self.out, s.name, inner).body(s.body)
            return
        if isinstance(s, ast.ClassDef):
            self.body(s.body)
            return
        if isinstance(s, (ast.If, ast.While, ast.Assert)):
            self.condition(s.test, statement=type(s).__name__.lower())
        for child in _own_expressions(s):
            self.expressions(child)
        if isinstance(s, ast.Assign):
            for t in s.targets:
                self.flow.assign(t, s.value)
        elif isinstance(s, (ast.AnnAssign, ast.AugAssign)) and s.value is not None:
            self.flow.assign(s.target, s.value)
        for field in ("body", "orelse", "finalbody"):
            self.body(getattr(s, field, None) or [])
        for h in getattr(s, "handlers", None) or []:
            self.body(h.body)

    def add(self, node: ast.AST, rule: str, statement: str = "") -> None:
        """A finding at `node`; `statement`: the keyword of the statement whose test it is ("if",
        "while", "assert"), read from the tree, so a test continued onto later lines keeps it."""
        self.out.append((node.lineno, node.col_offset, rule, self.function, statement))

    def expressions(self, node: ast.AST) -> None:
        for n in ast.walk(node):
            if isinstance(n, ast.Call):
                self.call(n)
            elif isinstance(n, ast.Subscript) and isinstance(n.ctx, ast.Load):
                if self.is_tensor_mask(n.slice) and self.flow.origin(n.value) not in _HOST_SIDE:
                    self.add(n, "host_mask_on_device" if self.flow.is_host_sourced(n.slice) else "boolean_mask")
            elif isinstance(n, ast.IfExp):
                self.condition(n.test)

    def condition(self, test: ast.AST, statement: str = "") -> None:
        """`if t:` / `while t:` / `assert t` / `a if t else b`: Python calls bool() on a tensor test."""
        if isinstance(test, ast.BoolOp):
            for v in test.values:
                self.condition(v, statement)
        elif isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
            self.condition(test.operand, statement)
        elif self.is_tensor(test):
            self.add(test, "tensor_condition", statement)

    def is_tensor_mask(self, node: ast.AST) -> bool:
        """A boolean mask that is a tensor: a comparison with a tensor side, a mask name, `~`/`&` of them
        (pandas' `df[df.x == y]` compares a column, which is not known to be a tensor, and is left alone)."""
        if isinstance(node, ast.Compare):
            return self.is_tensor(node)
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Invert):
            return self.is_tensor_mask(node.operand)
        if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.BitAnd, ast.BitOr, ast.BitXor)):
            return self.is_tensor_mask(node.left) or self.is_tensor_mask(node.right)
        return self.flow.is_mask(node) and not isinstance(node, (ast.Compare, ast.BinOp, ast.UnaryOp)) \
            and self.flow.origin(node) not in _HOST_SIDE

    def is_tensor(self, node: ast.AST) -> bool:
        """Evidence that `node` is a device tensor (a Python value or a host tensor is not)."""
        o = self.flow.origin(node)
        if o in _HOST_SIDE:
            return False
        if o == DEVICE or (isinstance(node, ast.Name) and node.id in self.flow.masks):
            return True
        if isinstance(node, ast.Call):
            f = node.func
            if isinstance(f, ast.Attribute) and f.attr in REDUCTIONS:
                return getattr(f.value, "id", None) not in NOT_TENSOR_MODULES  # np.median(x) is NumPy's
            return isinstance(f, ast.Attribute) and getattr(f.value, "id", None) == "torch" \
                and not f.attr.startswith(("is_", "get_", "device", "compile"))
        if isinstance(node, ast.Compare):
            return any(self.is_tensor(x) for x in [node.left] + node.comparators)
        if isinstance(node, (ast.BinOp, ast.UnaryOp)):
            return any(self.is_tensor(x) for x in ast.iter_child_nodes(node) if isinstance(x, ast.expr))
        return False

    def call(self, c: ast.Call) -> None:
        f = c.func
        if isinstance(f, ast.Attribute):
            self.method_call(c, f)
        if isinstance(f, ast.Name) and f.id in ("int", "float", "bool") and len(c.args) == 1 and self.is_tensor(c.args[0]):
            self.add(c, "python_scalar")
        if F.is_torch(f, *F.FROM_DATA) and F.factory_origin(c) == DEVICE and c.args \
                and self.flow.origin(c.args[0]) != DEVICE:
            self.add(c, "tensor_from_host_data")
        if F.is_torch(f, *DATA_DEPENDENT) and c.args and self.flow.origin(c.args[0]) not in _HOST_SIDE:
            self.add(c, "data_dependent_shape")
        if F.is_torch(f, "where") and len(c.args) == 1 and not c.keywords:
            self.add(c, "data_dependent_shape")
        if F.is_torch(f, "synchronize"):
            self.add(c, "explicit_sync")
        if F.is_torch(f, "repeat_interleave"):
            self.repeat_interleave(c, c.args[1] if len(c.args) > 1 else F.keyword(c, "repeats")
                                   or (c.args[0] if len(c.args) == 1 else None))
        numbers = [k.value for k in c.keywords if k.arg in NUMBER_KEYWORDS]
        if F.is_torch(f, "full") and len(c.args) >= 2:
            numbers.append(c.args[1])
        if any(self.is_tensor(v) for v in numbers):
            self.add(c, "tensor_as_number")

    def method_call(self, c: ast.Call, f: ast.Attribute) -> None:
        base = self.flow.origin(f.value)
        host = base in _HOST_SIDE
        m = f.attr
        if m in ("item", "tolist") and not c.args and not host:
            self.add(c, m)
        elif m in ("cpu", "numpy") and not host:
            self.add(c, "to_host")
        elif m in DATA_DEPENDENT and not host and not (isinstance(f.value, ast.Name) and f.value.id == "torch"):
            self.add(c, "data_dependent_shape")
        elif m == "synchronize" and not F.is_torch(f, "synchronize"):
            self.add(c, "explicit_sync")
        elif m == "to":
            self.to_call(c, base)
        elif m == "repeat_interleave" and not host and not F.is_torch(f, "repeat_interleave"):
            self.repeat_interleave(c, c.args[0] if c.args else F.keyword(c, "repeats"))
        elif m == "cuda" and not F.is_true(F.keyword(c, "non_blocking")) and base in (HOST, PINNED):
            self.add(c, "blocking_to_device")
        elif m == "copy_" and F.is_true(F.keyword(c, "non_blocking")) and c.args:
            src = self.flow.origin(c.args[0])
            if (src == HOST and base != HOST) or (base == HOST and src != HOST):
                self.add(c, "unpinned_non_blocking")

    def repeat_interleave(self, c: ast.Call, repeats: Optional[ast.AST]) -> None:
        """Without output_size, tensor repeats make the op read the output size back; a Python number (a
        literal, or a name holding one) or host repeats do not."""
        if F.keyword(c, "output_size") is not None or repeats is None or isinstance(repeats, ast.Constant):
            return
        if self.flow.origin(repeats) not in _HOST_SIDE:
            self.add(c, "repeat_interleave")

    def to_call(self, c: ast.Call, base: Optional[str]) -> None:
        dev = F.keyword(c, "device") or (c.args[0] if c.args else None)
        non_blocking = F.is_true(F.keyword(c, "non_blocking"))  # positional: .to(device, dtype, non_blocking)
        non_blocking = non_blocking or (len(c.args) >= 3 and F.is_true(c.args[2]))
        if F.is_cpu_literal(dev):
            if not non_blocking and base not in _HOST_SIDE:
                self.add(c, "to_host")
        elif dev is not None and non_blocking and base == HOST:
            self.add(c, "unpinned_non_blocking")
        elif dev is not None and not non_blocking and base in (HOST, PINNED) and not F.is_dtype(dev):
            self.add(c, "blocking_to_device")


def _own_expressions(s: ast.stmt) -> Iterator[ast.AST]:
    """The expressions of a statement that are not in its nested bodies (those are walked as statements)."""
    for name, value in ast.iter_fields(s):
        if name in ("body", "orelse", "finalbody", "handlers"):
            continue
        for v in value if isinstance(value, list) else [value]:
            if isinstance(v, ast.AST) and not isinstance(v, ast.stmt):
                yield v

