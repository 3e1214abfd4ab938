"""No module of the guard or the app reads another's underscore names (issue 33 item 3).

Ruff's SLF001 (``pyproject.toml``) flags ``obj._name`` where ``obj`` is not ``self``, ``cls`` or ``super()``.
What it cannot see, this walks the syntax trees of ``casekeeper/``, ``shared/``, ``examples/`` and
``function_app.py`` for:

- ``from package.module import _name``: an underscore name of another module (ruff has no rule for it
  between modules of one project);
- an import from a module whose path has an underscore part (``casekeeper._numbers``) by a module outside
  the package that holds it;
- ``getattr``/``hasattr``/``setattr``/``delattr`` of a literal underscore name on another object;
- ``obj._name`` on another object (what SLF001 checks, so that this stands without ruff's per-file ignores);
- ``self._name`` where ``self`` is annotated: a method that borrows another class's private attributes
  through a ``Protocol`` of them, one idea cut in two.

Agent Framework 1.23 does not export everything Casekeeper needs: :data:`OUTSIDE` lists, per module, the
underscore names of other packages it may use, and those modules are the only ones. A listed name no module
uses any more fails the test, so the list stays true.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCANNED = ["casekeeper", "shared", "examples", "function_app.py"]
FIRST_PARTY = {"casekeeper", "shared", "examples", "devhost", "chaos", "sim", "benchmarks", "tests", "function_app"}
ACCESSORS = {"getattr", "hasattr", "setattr", "delattr"}
# Documented public API that is spelled with an underscore: os._exit, sys._getframe, a named tuple's methods.
DOCUMENTED = {"_exit", "_getframe", "_replace", "_asdict", "_fields", "_field_defaults", "_make"}

OUTSIDE: dict[str, set[str]] = {
    # The restricted decoder is the framework's unpickler and key sets with one door closed; its encoder is
    # the framework's own (casekeeper/checkpoint_decoding.py's docstring).
    "casekeeper/checkpoint_decoding.py": {
        "agent_framework._workflows._checkpoint_encoding",
        "agent_framework._workflows._runner_context",
        "_BLOCKED_FRAMEWORK_GLOBAL_KEYS",
        "_BUILTIN_ALLOWED_TYPE_KEYS",
        "_GETATTR_GLOBAL_KEYS",
        "_PICKLE_MARKER",
        "_REGISTERED_CHECKPOINT_TYPE_KEYS",
        "_TYPE_MARKER",
        "_RestrictedUnpickler",
        "_verify_type",
    },
    # Resetting a Workflow object between runs, and asking its runner context what is in flight
    # (shared/workflow/reuse.py's docstring).
    "shared/workflow/reuse.py": {
        "_runner",
        "_previous_checkpoint_id",
        "_messages",
        "_pending_request_info_events",
        "_event_queue",
        "_get_effective_checkpoint_storage",
    },
}


@dataclass(frozen=True)
class Finding:
    line: int
    name: str
    what: str


def private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__")) and name not in DOCUMENTED


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def is_own(obj: ast.expr) -> bool:
    """``self``, ``cls``, ``mcs`` or ``super()``: the object's own attributes."""
    if isinstance(obj, ast.Name):
        return obj.id in {"self", "cls", "mcs"}
    return isinstance(obj, ast.Call) and isinstance(obj.func, ast.Name) and obj.func.id == "super"


def private_module_part(module: str, importer: str) -> str | None:
    """The underscore part of ``module``'s path that ``importer`` may not reach: ``None`` when there is none,
    or when the importer sits inside the package that holds it."""
    parts = module.split(".")
    for i, part in enumerate(parts):
        if private(part):
            holder = ".".join(parts[:i])
            if parts[0] in FIRST_PARTY and (importer == holder or importer.startswith(holder + ".")):
                continue
            return part
    return None


class Reads(ast.NodeVisitor):
    def __init__(self, module: str, *, is_package: bool = False) -> None:
        self.module = module
        # What a relative import is relative to: the package itself for its __init__, else the module's package.
        self.base = module.split(".") if is_package else module.split(".")[:-1]
        self.found: list[Finding] = []
        self.annotated_self: list[bool] = [False]

    def note(self, node: ast.AST, name: str, what: str) -> None:
        self.found.append(Finding(getattr(node, "lineno", 0), name, what))

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        if node.level:  # relative: resolve against this module's package
            base = self.base[: len(self.base) - node.level + 1]
            module = ".".join([*base, *(node.module.split(".") if node.module else [])])
        else:
            module = node.module or ""
        part = private_module_part(module, self.module)
        if part is not None:
            self.note(node, module, f"imports from {module}")
        for alias in node.names:
            if private(alias.name) and module != self.module:
                self.note(node, alias.name, f"imports {alias.name} from {module}")

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            part = private_module_part(alias.name, self.module)
            if part is not None:
                self.note(node, alias.name, f"imports {alias.name}")

    def visit_FunctionDef(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        args = node.args.posonlyargs + node.args.args
        annotation = args[0].annotation if args and args[0].arg == "self" else None
        # self: Self is the class's own; self: SomeProtocol borrows another's attributes.
        self.annotated_self.append(annotation is not None and ast.unparse(annotation) not in {"Self", "typing.Self"})
        self.generic_visit(node)
        self.annotated_self.pop()

    visit_AsyncFunctionDef = visit_FunctionDef

    def visit_Lambda(self, node: ast.Lambda) -> None:
        self.annotated_self.append(False)
        self.generic_visit(node)
        self.annotated_self.pop()

    def visit_Attribute(self, node: ast.Attribute) -> None:
        if private(node.attr):
            if not is_own(node.value):
                self.note(node, node.attr, f"reads {ast.unparse(node)}")
            elif self.annotated_self[-1] and isinstance(node.value, ast.Name) and node.value.id == "self":
                self.note(node, node.attr, f"reads {ast.unparse(node)} through an annotated self")
        self.generic_visit(node)

    def visit_Call(self, node: ast.Call) -> None:
        func = node.func
        if isinstance(func, ast.Name) and func.id in ACCESSORS and len(node.args) >= 2:
            obj, name = node.args[0], node.args[1]
            literal = isinstance(name, ast.Constant) and isinstance(name.value, str)
            if literal and private(name.value) and not is_own(obj):
                self.note(node, name.value, f"{func.id}({ast.unparse(obj)}, {name.value!r})")
        self.generic_visit(node)


def reads(source: str, module: str, *, is_package: bool = False) -> list[Finding]:
    visitor = Reads(module, is_package=is_package)
    visitor.visit(ast.parse(source))
    return visitor.found


def scanned_files() -> list[Path]:
    files: list[Path] = []
    for entry in SCANNED:
        path = ROOT / entry
        files.extend(sorted(path.rglob("*.py")) if path.is_dir() else [path])
    return [f for f in files if "__pycache__" not in f.parts and ".egg-info" not in str(f)]


def test_no_module_reads_another_s_underscore_names() -> None:
    unexpected: list[str] = []
    used: dict[str, set[str]] = {}
    for path in scanned_files():
        rel = path.relative_to(ROOT).as_posix()
        allowed = OUTSIDE.get(rel, set())
        source = path.read_text(encoding="utf-8")
        for finding in reads(source, module_name(path), is_package=path.name == "__init__.py"):
            if finding.name in allowed:
                used.setdefault(rel, set()).add(finding.name)
            else:
                unexpected.append(f"{rel}:{finding.line}: {finding.what}")
    assert unexpected == [], "\n".join(unexpected)
    listed = {rel: OUTSIDE.get(rel, set()) for rel in OUTSIDE}
    stale = {rel: sorted(names - used.get(rel, set())) for rel, names in listed.items() if names - used.get(rel, set())}
    assert stale == {}, "listed but no longer used: delete them from OUTSIDE"


def test_agent_framework_does_not_export_what_the_listed_modules_take_from_inside_it() -> None:
    """Each underscore name taken from Agent Framework is taken because the framework exports it nowhere
    public; were it exported, it should be imported from there instead."""
    import agent_framework

    taken = {n.lstrip("_") for names in OUTSIDE.values() for n in names if "." not in n}
    # Public names taken from its private modules (casekeeper/checkpoint_decoding.py imports them).
    taken |= {"encode_checkpoint_value", "MessageType"}
    assert taken & set(dir(agent_framework)) == set()


@pytest.mark.parametrize(
    ("source", "module", "expected"),
    [
        ("from casekeeper.core.cases import _advance", "casekeeper.core.entries", ["_advance"]),
        ("from .cases import _advance", "casekeeper.core.entries", ["_advance"]),
        ("from casekeeper import _numbers", "shared.app.x", ["_numbers"]),
        ("from casekeeper._numbers import inexact_numbers", "shared.app.x", ["casekeeper._numbers"]),
        ("import casekeeper._numbers", "shared.app.x", ["casekeeper._numbers"]),
        ("from agent_framework._workflows._runner import Runner", "shared.x", ["agent_framework._workflows._runner"]),
        ("x = guard._run", "casekeeper.effects", ["_run"]),
        ("self._guard._run(1)", "casekeeper.effects", ["_run"]),
        ("x = getattr(workflow, '_runner', None)", "shared.workflow.x", ["_runner"]),
        ("setattr(obj, '_x', 1)", "shared.x", ["_x"]),
        ("def f(self: Parts) -> None:\n    self._ledger.write()", "casekeeper.core.on_rows", ["_ledger"]),
    ],
)
def test_each_kind_of_reach_is_found(source: str, module: str, expected: list[str]) -> None:
    assert [f.name for f in reads(source, module)] == expected


@pytest.mark.parametrize(
    ("source", "module"),
    [
        ("from casekeeper._numbers import inexact_numbers", "casekeeper.guard"),  # inside the package
        ("from casekeeper.core.cases import advance", "casekeeper.core.entries"),
        ("class A:\n    def f(self) -> None:\n        self._x = 1\n        print(self._x)", "shared.x"),
        ("class A(B):\n    def f(self) -> None:\n        super()._hook()", "shared.x"),
        ("x = obj.__class__; y = obj.__dict__", "shared.x"),
        ("os._exit(1)", "examples.refund.payments"),
        ("class A:\n    def f(self: Self) -> None:\n        self._x = 1", "shared.x"),
    ],
)
def test_what_is_not_a_reach_into_another_module_is_not_found(source: str, module: str) -> None:
    assert reads(source, module) == []
