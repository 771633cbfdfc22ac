"""Every `raise`, `assert` and exit a framework's validation code can reach, read from its source with `ast`.

A walk starts at entry points (`module:function` or `module:Class.method`) and follows the calls it can
resolve statically into the modules it is told to follow: functions of the same module, names imported from
a followed module, `self.method()` and `super().method()` through the class's bases, `Class.method(self)`,
`module.function()`, a followed class called (its `__init__` and `__post_init__`), a property read on
`self`, and a nested function called by name. Each statement is listed once, in the function it is
written in, with:

    kind        raise | assert | exit (sys.exit, exit, parser.error) | call (a call of a raising helper
                the walk is told not to enter, e.g. LLaMA-Factory's check_version: each call site is one
                check of its own)
    condition   when it refuses: the conditions of the `if`/`elif`/`else`, loops and handlers around it
                in its function, and for an assert `not (test)`
    message     the exception, assert message or helper call, as written
    file, line  where it is written (the path below the source root; `line` is its first line, `end` last)
    guard       the lines of the innermost `if` test around it (a check can fail while its condition is
                evaluated: `if x > config.missing.size:` raises there)
    via         the functions that call this function on the walk (the entry points have none)

A statement's `id` is `function:hash`, the hash of its file, function, kind, condition and message: the
same statement keeps its id when lines move, and a changed condition or message is a new statement.

Imports nothing of the frameworks (a checkout or an environment's site-packages is read as text), so one
python reads every pin. The pins are described in `tests/diffval/pins.py`.
"""

from __future__ import annotations

import ast
import hashlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

EXITS = {("sys", "exit"), ("", "exit"), ("", "quit"), ("os", "_exit")}


@dataclass
class Statement:
    id: str
    file: str
    line: int
    end: int
    function: str
    kind: str
    condition: str
    message: str
    via: list[str] = field(default_factory=list)
    guard: list[int] = field(default_factory=list)  # the lines of the innermost `if` test around it

    def row(self) -> dict[str, object]:
        return {
            "id": self.id,
            "file": self.file,
            "line": self.line,
            "end": self.end,
            "guard": list(self.guard),
            "function": self.function,
            "kind": self.kind,
            "condition": self.condition,
            "message": self.message,
            "via": sorted(self.via),
        }


@dataclass
class Module:
    name: str
    path: Path
    rel: str  # path below its source root
    tree: ast.Module
    imports: dict[str, tuple[str, str]]  # local name -> (module, attribute or "" for a module)
    defs: dict[str, ast.AST]  # top-level functions and classes
    stars: list[str]  # modules imported with `from m import *`


@dataclass(frozen=True)
class Func:
    module: str
    qualname: str  # function, Class.method, or outer.inner for a nested function
    node: ast.FunctionDef | ast.AsyncFunctionDef
    cls: str | None  # the class a method is defined in


class Walker:
    """Statements reachable from `entries` in the sources under `roots`, following calls into modules whose
    dotted name starts with one of `follow`; calls of the functions named in `helpers` are statements
    themselves (kind `call`) and are not entered."""

    def __init__(
        self,
        roots: list[Path],
        follow: tuple[str, ...],
        helpers: tuple[str, ...] = (),
        skip: tuple[str, ...] = (),
        aliases: dict[str, str] | None = None,
    ) -> None:
        self.roots = roots
        self.aliases = aliases or {}  # module.Name -> module.Name where a name is bound at run time
        self.follow = follow
        self.helpers = set(helpers)
        self.skip = set(skip)  # qualified functions (module:qualname) not entered
        self.modules: dict[str, Module | None] = {}
        self.statements: dict[str, Statement] = {}
        self.seen: dict[tuple[str, str], Func] = {}
        self.callers: dict[tuple[str, str], set[str]] = {}
        self.order: list[Statement] = []

    # -- modules and names ---------------------------------------------------------------------------
    def module(self, name: str) -> Module | None:
        if name in self.modules:
            return self.modules[name]
        found = None
        parts = name.split(".")
        for root in self.roots:
            for path in (root.joinpath(*parts).with_suffix(".py"), root.joinpath(*parts, "__init__.py")):
                if path.is_file():
                    found = self._load(name, path, root)
                    break
            if found:
                break
        self.modules[name] = found
        return found

    @staticmethod
    def _load(name: str, path: Path, root: Path) -> Module:
        # a few framework files are not UTF-8 (comments in GBK): the code is ASCII either way
        tree = ast.parse(path.read_text(encoding="utf-8", errors="replace"), filename=str(path))
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        imports: dict[str, tuple[str, str]] = {}
        defs: dict[str, ast.AST] = {}
        stars: list[str] = []
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.asname:
                        imports[alias.asname] = (alias.name, "")
                    else:
                        imports[alias.name.split(".")[0]] = (alias.name.split(".")[0], "")
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    pkg = package.split(".")
                    pkg = pkg[: len(pkg) - node.level + 1] if node.level > 1 else pkg
                    base = ".".join([*pkg, base] if base else pkg)
                for alias in node.names:
                    if alias.name == "*":
                        stars.append(base)
                    else:
                        imports[alias.asname or alias.name] = (base, alias.name)
        for node in tree.body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                defs[node.name] = node
        return Module(name, path, path.relative_to(root).as_posix(), tree, imports, defs, stars)

    def followed(self, module: str) -> bool:
        return any(module == f or module.startswith(f + ".") for f in self.follow)

    def lookup(self, module: str, name: str, depth: int = 0) -> tuple[str, ast.AST] | None:
        """The definition `name` means in `module`: (defining module, node), through imports."""
        if f"{module}.{name}" in self.aliases:
            target, _, real = self.aliases[f"{module}.{name}"].rpartition(".")
            return self.lookup(target, real, depth + 1)
        mod = self.module(module)
        if mod is None or depth > 8:
            return None
        if name in mod.defs:
            return module, mod.defs[name]
        if name in mod.imports:
            target, attr = mod.imports[name]
            if attr:
                if self.module(f"{target}.{attr}") is not None:
                    return None  # a submodule, not a definition
                return self.lookup(target, attr, depth + 1)
        for star in mod.stars:
            found = self.lookup(star, name, depth + 1)
            if found:
                return found
        return None

    def bases(self, module: str, cls: ast.ClassDef) -> list[tuple[str, ast.ClassDef]]:
        """The class and its bases in method resolution order (depth-first, as far as the sources go)."""
        out: list[tuple[str, ast.ClassDef]] = [(module, cls)]
        for base in cls.bases:
            found = None
            if isinstance(base, ast.Name):
                found = self.lookup(module, base.id)
            elif isinstance(base, ast.Attribute) and isinstance(base.value, ast.Name):
                mod = self.module(module)
                if mod and base.value.id in mod.imports:
                    target, attr = mod.imports[base.value.id]
                    found = self.lookup(f"{target}.{attr}" if attr else target, base.attr)
            if found and isinstance(found[1], ast.ClassDef):
                for item in self.bases(*found):  # type: ignore[arg-type]
                    if item not in out:
                        out.append(item)
        return out

    def method(
        self, module: str, cls: ast.ClassDef, name: str, after: str | None = None
    ) -> tuple[str, ast.ClassDef, ast.FunctionDef] | None:
        mro = self.bases(module, cls)
        if after is not None:
            names = [c.name for _, c in mro]
            mro = mro[names.index(after) + 1 :] if after in names else []
        for mod, c in mro:
            for node in c.body:
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == name:
                    return mod, c, node  # type: ignore[return-value]
        return None

    # -- the walk -----------------------------------------------------------------------------------
    def entry(self, target: str) -> None:
        """`module:function`, `module:Class.method`, or `module:Class.*` (every method of the class)."""
        module, _, qual = target.partition(":")
        name, _, meth = qual.partition(".")
        found = self.lookup(module, name)
        if found is None:
            raise LookupError(f"{target}: not found under {[str(r) for r in self.roots]}")
        mod, node = found
        if isinstance(node, ast.ClassDef):
            if meth == "*":
                for item in node.body:
                    if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)):
                        self.walk(Func(mod, f"{node.name}.{item.name}", item, node.name), None)
                return
            hit = self.method(mod, node, meth)
            if hit is None:
                raise LookupError(f"{target}: no method {meth}")
            self.walk(Func(hit[0], f"{hit[1].name}.{meth}", hit[2], hit[1].name), None)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            self.walk(Func(mod, node.name, node, None), None)

    def walk(self, func: Func, caller: str | None) -> None:
        key = (func.module, func.qualname)
        if f"{func.module}:{func.qualname}" in self.skip:
            return
        self.callers.setdefault(key, set())
        if caller:
            self.callers[key].add(caller)
        if key in self.seen:
            return
        self.seen[key] = func
        nested = {
            n.name: n
            for n in ast.walk(func.node)
            if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n is not func.node
        }
        self._body(func, func.node.body, [], nested)
        for ret in _own_nodes(func.node):  # a decorator's wrapper: `return wrapper` runs in its place
            if isinstance(ret, ast.Return) and isinstance(ret.value, ast.Name) and ret.value.id in nested:
                inner = nested[ret.value.id]
                self.walk(Func(func.module, f"{func.qualname}.{inner.name}", inner, func.cls), caller=None)

    def _body(self, func: Func, body: list[ast.stmt], conds: list[str], nested: dict) -> None:
        for stmt in body:
            self._stmt(func, stmt, conds, nested)

    guard: list[int] = []  # the innermost `if` test being walked (set around its branches)

    def _stmt(self, func: Func, stmt: ast.stmt, conds: list[str], nested: dict) -> None:
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            return  # walked when called
        if isinstance(stmt, ast.If):
            self._calls(func, stmt.test, conds, nested)
            outer, self.guard = self.guard, [stmt.test.lineno, stmt.test.end_lineno or stmt.test.lineno]
            self._body(func, stmt.body, [*conds, _part(stmt.test)], nested)
            self._body(func, stmt.orelse, [*conds, f"not ({ast.unparse(stmt.test)})"], nested)
            self.guard = outer
            return
        if isinstance(stmt, (ast.For, ast.AsyncFor)):
            self._calls(func, stmt.iter, conds, nested)
            loop = f"[for {ast.unparse(stmt.target)} in {ast.unparse(stmt.iter)}]"
            self._body(func, stmt.body, [*conds, loop], nested)
            self._body(func, stmt.orelse, conds, nested)
            return
        if isinstance(stmt, ast.While):
            self._calls(func, stmt.test, conds, nested)
            self._body(func, stmt.body, [*conds, f"[while {ast.unparse(stmt.test)}]"], nested)
            self._body(func, stmt.orelse, conds, nested)
            return
        if isinstance(stmt, (ast.With, ast.AsyncWith)):
            for item in stmt.items:
                self._calls(func, item.context_expr, conds, nested)
            self._body(func, stmt.body, conds, nested)
            return
        if isinstance(stmt, ast.Try) or type(stmt).__name__ == "TryStar":
            self._body(func, stmt.body, conds, nested)  # type: ignore[attr-defined]
            for handler in stmt.handlers:  # type: ignore[attr-defined]
                caught = ast.unparse(handler.type) if handler.type is not None else "BaseException"
                self._body(func, handler.body, [*conds, f"except {caught}"], nested)
            self._body(func, stmt.orelse, conds, nested)  # type: ignore[attr-defined]
            self._body(func, stmt.finalbody, conds, nested)  # type: ignore[attr-defined]
            return
        if isinstance(stmt, ast.Match):
            self._calls(func, stmt.subject, conds, nested)
            for case in stmt.cases:
                self._body(func, case.body, [*conds, f"case {ast.unparse(case.pattern)}"], nested)
            return
        if isinstance(stmt, ast.Raise):
            if stmt.exc is None:
                return  # a re-raise: the check is where the exception came from
            self._calls(func, stmt.exc, conds, nested)
            self._add(func, stmt, "raise", conds, ast.unparse(stmt.exc))
            return
        if isinstance(stmt, ast.Assert):
            self._calls(func, stmt.test, conds, nested)
            message = ast.unparse(stmt.msg) if stmt.msg is not None else ""
            self._add(func, stmt, "assert", [*conds, f"not ({ast.unparse(stmt.test)})"], message)
            return
        self._calls(func, stmt, conds, nested)

    def _add(self, func: Func, node: ast.AST, kind: str, conds: list[str], message: str) -> None:
        mod = self.module(func.module)
        assert mod is not None
        condition = " and ".join(conds)
        text = "\n".join((mod.rel, func.qualname, kind, condition, message))
        digest = hashlib.sha1(text.encode("utf-8")).hexdigest()[:6]
        sid = f"{func.qualname}:{digest}"
        n = 2
        while sid in self.statements and self.statements[sid].line != node.lineno:  # type: ignore[attr-defined]
            sid = f"{func.qualname}:{digest}.{n}"
            n += 1
        if sid in self.statements:
            return
        st = Statement(
            sid,
            mod.rel,
            node.lineno,  # type: ignore[attr-defined]
            node.end_lineno or node.lineno,  # type: ignore[attr-defined]
            func.qualname,
            kind,
            condition,
            message,
            guard=list(self.guard),
        )
        self.statements[sid] = st
        self.order.append(st)

    def _calls(self, func: Func, node: ast.AST, conds: list[str], nested: dict) -> None:
        for sub in _own_nodes(node):
            if isinstance(sub, ast.Call):
                self._call(func, sub, conds, nested)
            elif (
                isinstance(sub, ast.Attribute)
                and isinstance(sub.ctx, ast.Load)
                and isinstance(sub.value, ast.Name)
                and sub.value.id == "self"
                and func.cls is not None
            ):
                self._property(func, sub.attr)

    def _property(self, func: Func, attr: str) -> None:
        cls = self._class(func)
        if cls is None:
            return
        hit = self.method(cls[0], cls[1], attr)
        if hit and any(_decorator_name(d) in ("property", "cached_property") for d in hit[2].decorator_list):
            self._enter(Func(hit[0], f"{hit[1].name}.{attr}", hit[2], hit[1].name), func)

    def _class(self, func: Func) -> tuple[str, ast.ClassDef] | None:
        if func.cls is None:
            return None
        found = self.lookup(func.module, func.cls)
        if found and isinstance(found[1], ast.ClassDef):
            return found[0], found[1]
        return None

    def _enter(self, target: Func, caller: Func) -> None:
        if self.followed(target.module):
            self.walk(target, f"{caller.module}:{caller.qualname}")

    def _call(self, func: Func, call: ast.Call, conds: list[str], nested: dict) -> None:
        f = call.func
        name = f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else None
        owner = f.value.id if isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name) else ""
        if name is None:
            return
        if (owner, name) in EXITS or (isinstance(f, ast.Attribute) and name == "error" and owner == "parser"):
            self._add(func, call, "exit", conds, ast.unparse(call))
            return
        if name in self.helpers:
            self._add(func, call, "call", conds, ast.unparse(call))
            return
        if isinstance(f, ast.Name):
            if name in nested:
                node = nested[name]
                self.walk(Func(func.module, f"{func.qualname}.{name}", node, func.cls), None)
                key = (func.module, f"{func.qualname}.{name}")
                self.callers.setdefault(key, set()).add(f"{func.module}:{func.qualname}")
                return
            found = self.lookup(func.module, name)
            if found:
                self._definition(found[0], found[1], func)
            return
        assert isinstance(f, ast.Attribute)
        if isinstance(f.value, ast.Name) and f.value.id in ("self", "cls"):
            cls = self._class(func)
            if cls:
                hit = self.method(cls[0], cls[1], name)
                if hit:
                    self._enter(Func(hit[0], f"{hit[1].name}.{name}", hit[2], hit[1].name), func)
            return
        if (
            isinstance(f.value, ast.Call)
            and isinstance(f.value.func, ast.Name)
            and f.value.func.id == "super"
            and func.cls
        ):
            cls = self._class(func)
            if cls:
                hit = self.method(cls[0], cls[1], name, after=cls[1].name)
                if hit:
                    self._enter(Func(hit[0], f"{hit[1].name}.{name}", hit[2], hit[1].name), func)
            return
        if isinstance(f.value, ast.Name):
            mod = self.module(func.module)
            if mod is None:
                return
            found = self.lookup(func.module, f.value.id)
            if found and isinstance(found[1], ast.ClassDef):  # Class.method(self)
                hit = self.method(found[0], found[1], name)
                if hit:
                    self._enter(Func(hit[0], f"{hit[1].name}.{name}", hit[2], hit[1].name), func)
                return
            if f.value.id in mod.imports:  # module.function()
                target, attr = mod.imports[f.value.id]
                dotted = f"{target}.{attr}" if attr else target
                found = self.lookup(dotted, name)
                if found:
                    self._definition(found[0], found[1], func)

    def _definition(self, module: str, node: ast.AST, caller: Func) -> None:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            self._enter(Func(module, node.name, node, None), caller)
        elif isinstance(node, ast.ClassDef):  # constructing a followed class runs its initialisers
            for init in ("__init__", "__post_init__"):
                hit = self.method(module, node, init)
                if hit:
                    self._enter(Func(hit[0], f"{hit[1].name}.{init}", hit[2], hit[1].name), caller)

    def result(self) -> list[Statement]:
        for st in self.order:
            for (module, qual), callers in self.callers.items():
                mod = self.module(module)
                if mod and mod.rel == st.file and qual == st.function:
                    st.via = sorted(callers)
        return list(self.order)


def _part(test: ast.expr) -> str:
    """A condition as one operand of the `and` that joins a statement's conditions."""
    text = ast.unparse(test)
    loose = (ast.IfExp, ast.Lambda, ast.NamedExpr)
    if isinstance(test, loose) or (isinstance(test, ast.BoolOp) and isinstance(test.op, ast.Or)):
        return f"({text})"
    return text


def _own_nodes(node: ast.AST) -> Iterator[ast.AST]:
    """The nodes of an expression or simple statement, not entering nested functions, lambdas or classes."""
    stack = [node]
    while stack:
        n = stack.pop()
        yield n
        for child in ast.iter_child_nodes(n):
            if not isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
                stack.append(child)


def _decorator_name(node: ast.AST) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    if isinstance(node, ast.Call):
        return _decorator_name(node.func)
    return ""
