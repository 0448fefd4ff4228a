"""The package layout: layers, import circles, and what each package exports.

An AST walk over every module of modefsm. Layers, lowest first (docs/architecture.md):
errors -> spec -> log -> restore/store -> engine -> replay/diagram -> protocol -> cli.
A module imports only modules of its own layer or lower ones, whatever the import's kind
(top level, inside a function, under ``TYPE_CHECKING``). The imports run when a module is
imported (top level, outside ``TYPE_CHECKING``; a package's ``__init__`` runs before its
modules) form no circle.
"""

from __future__ import annotations

import ast
import importlib
import re
import subprocess
import sys
import warnings
from collections.abc import Iterator
from pathlib import Path

import pytest

import modefsm

PACKAGE = Path(modefsm.__file__).resolve().parent

LAYERS: dict[str, float] = {
    "modefsm.errors": 0,
    "modefsm._lazy": 0,  # the lazy attributes of the package __init__ files
    "modefsm.spec": 1,
    "modefsm.log._records": 1.5,  # the record format: a leaf below the writer and reader
    "modefsm.log": 2,
    "modefsm.store": 3,
    "modefsm.engine": 4,
    "modefsm.replay": 5,
    "modefsm.diagram": 5,
    "modefsm.protocol": 6,
    "modefsm.cli": 7,
    "modefsm.__main__": 7,
    "modefsm": 8,  # the public facade: names imported lazily from every layer
}
"""The layer of each stage (a package, or a module of the top level)."""

KNOWN_UPWARD: set[tuple[str, str]] = set()
"""Imports allowed to go up a layer: none."""

_PROTOCOL = (
    "inside the protocol stage, the transports and the version adapters use each other "
    "(negotiation builds the v2 agent; the v1 agent holds the shared engine and the stdio "
    "permission request): through the faces, which import all of them, they form a circle"
)
_LINES = (
    "the file store and its index read and repair the log file with the writer's own "
    "line helpers: one piece of code for the line format"
)
PRIVATE_ALLOWED: dict[tuple[str, str], str] = {
    ("modefsm.diagram._files", "modefsm.diagram.renderers._markdown"): (
        "the index page escapes Markdown as the review page does (_md)"
    ),
    ("modefsm.protocol.transport._http", "modefsm.protocol.v2._agent"): _PROTOCOL,
    ("modefsm.protocol.transport._negotiate", "modefsm.protocol.v2._agent"): _PROTOCOL,
    ("modefsm.protocol.v1._agent", "modefsm.protocol.transport._shared"): _PROTOCOL,
    ("modefsm.protocol.v1._agent", "modefsm.protocol.transport._stdio"): _PROTOCOL,
    ("modefsm.protocol.v2._agent", "modefsm.protocol.v1._agent"): (
        "the v2 agent is built over the v1 agent (its helpers _finish and _version)"
    ),
    ("modefsm.store._file", "modefsm.log._writer"): _LINES,
    ("modefsm.store._restore", "modefsm.log._writer"): _LINES,
}
"""Imports of another package's private module (``_name``), each with its reason: every
other import between packages goes through the package's face (its ``__init__``). A
package's own private modules are not another's, nor are those of the packages it sits in
(``renderers`` reads ``modefsm.diagram._model``: the face of ``modefsm.diagram`` imports
``renderers``, so it would be an import up its own stage)."""


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def stage(module: str) -> str:
    """The key of :data:`LAYERS` that *module* belongs to."""
    parts = module.split(".")
    for n in range(len(parts), 0, -1):
        key = ".".join(parts[:n])
        if key in LAYERS:
            return key
    raise AssertionError(f"{module}: no layer (add it to LAYERS)")


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _targets(module: str, node: ast.Import | ast.ImportFrom) -> Iterator[str]:
    """The modefsm modules an import statement in *module* names."""
    if isinstance(node, ast.Import):
        names = [a.name for a in node.names]
    else:
        base = node.module or ""
        if node.level:  # relative: resolve against the importing module's package
            package = module.split(".")
            if MODULES[module].name != "__init__.py":
                package = package[:-1]
            package = package[: len(package) - node.level + 1]
            base = ".".join([*package, base] if base else package)
        names = [base] + [f"{base}.{a.name}" for a in node.names]
    for name in names:
        if name in MODULES:  # modefsm modules only
            yield name


def imports(module: str) -> Iterator[tuple[str, bool]]:  # noqa: C901 - one walk, every kind
    """``(imported module, runs at import time)`` for every modefsm import in *module*."""
    tree = ast.parse(MODULES[module].read_text(encoding="utf-8"))

    def walk(nodes: list[ast.stmt], at_import: bool) -> Iterator[tuple[str, bool]]:
        for node in nodes:
            if isinstance(node, ast.Import | ast.ImportFrom):
                for target in _targets(module, node):
                    yield target, at_import
            elif isinstance(node, ast.If) and _is_type_checking(node):
                yield from walk(node.body, at_import=False)
                yield from walk(node.orelse, at_import)
            elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
                yield from walk_any(node, at_import=False)
            else:
                for child in ast.iter_child_nodes(node):
                    if isinstance(child, ast.stmt):
                        yield from walk([child], at_import)
                    else:
                        yield from walk_any(child, at_import=False)

    def walk_any(node: ast.AST, at_import: bool) -> Iterator[tuple[str, bool]]:
        for child in ast.walk(node):
            if isinstance(child, ast.Import | ast.ImportFrom):
                for target in _targets(module, child):
                    yield target, at_import

    yield from walk(tree.body, at_import=True)


def runtime_graph() -> dict[str, set[str]]:
    """Module -> the modefsm modules it imports when run: at import time or inside a
    function (``TYPE_CHECKING`` blocks left out), to the module itself, not its parents."""
    graph: dict[str, set[str]] = {m: set() for m in MODULES}
    for module, path in MODULES.items():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        checking = {
            id(inner)
            for node in ast.walk(tree)
            if isinstance(node, ast.If) and _is_type_checking(node)
            for stmt in node.body
            for inner in ast.walk(stmt)
        }
        for node in ast.walk(tree):
            if isinstance(node, ast.Import | ast.ImportFrom) and id(node) not in checking:
                graph[module].update(t for t in _targets(module, node) if t != module)
    return graph


def sdk_imports(module: str) -> list[str]:
    """The ACP SDK modules (``acp``, ``acp.*``) *module* imports, in any kind of import."""
    tree = ast.parse(MODULES[module].read_text(encoding="utf-8"))
    names: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            names.append(node.module)
    return [n for n in names if n == "acp" or n.startswith("acp.")]


def private_imports() -> set[tuple[str, str]]:
    """``(module, target)``: *module* imports *target*, a ``_private`` module of another package.

    Any kind of import counts (top level, inside a function, under ``TYPE_CHECKING``).
    """
    found: set[tuple[str, str]] = set()
    for module, path in MODULES.items():
        home = module if path.name == "__init__.py" else module.rpartition(".")[0]
        for target, _ in imports(module):
            owner, _, name = target.rpartition(".")
            inside = home == owner or home.startswith(owner + ".")  # its own, or a parent's
            if name.startswith("_") and MODULES[target].name != "__init__.py" and not inside:
                found.add((module, target))
    return found


def import_time_graph() -> dict[str, set[str]]:
    """What importing each module runs first: its imports, and their parent packages."""
    graph: dict[str, set[str]] = {m: set() for m in MODULES}
    for module in MODULES:
        for target, at_import in imports(module):
            if not at_import:
                continue
            parts = target.split(".")
            for n in range(1, len(parts) + 1):
                parent = ".".join(parts[:n])
                # a package's own modules run while it is being imported: no edge back to it
                if parent in MODULES and not (module + ".").startswith(parent + "."):
                    graph[module].add(parent)
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One circle of *graph* (its nodes, the first repeated at the end), if any."""
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return [*stack[stack.index(nxt) :], nxt]
            if nxt not in state and (found := visit(nxt)):
                return found
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (found := visit(node)):
            return found
    return None


class TestLayers:
    def test_every_module_has_a_layer(self):
        assert {m: stage(m) for m in MODULES}  # raises for a module without one
        assert "modefsm.spec._table" in MODULES

    def test_no_module_imports_a_higher_layer(self):
        upward = sorted(
            (module, target)
            for module in MODULES
            for target, _ in imports(module)
            if LAYERS[stage(target)] > LAYERS[stage(module)]
        )
        assert [u for u in upward if u not in KNOWN_UPWARD] == []

    def test_the_known_exception_is_still_needed(self):
        """When the store work removes it, drop it from KNOWN_UPWARD (this test says so)."""
        found = {(m, t) for m in MODULES for t, _ in imports(m)}
        stale = sorted(KNOWN_UPWARD - found)
        assert stale == [], f"remove from KNOWN_UPWARD: {stale}"

    def test_stages_import_each_other_in_one_direction(self):
        graph: dict[str, set[str]] = {}
        for module in MODULES:
            for target, _ in imports(module):
                if (module, target) not in KNOWN_UPWARD and stage(target) != stage(module):
                    graph.setdefault(stage(module), set()).add(stage(target))
        assert find_cycle(graph) is None

    def test_no_import_circle_when_modules_are_imported(self):
        assert find_cycle(import_time_graph()) is None

    def test_no_import_circle_even_through_imports_inside_functions(self):
        """A module imported inside a function (on first use) still forms no circle."""
        graph = runtime_graph()
        assert "modefsm.cli._demo_v2" in graph["modefsm.cli._demo"]  # the check sees it
        assert find_cycle(graph) is None

    def test_the_checks_see_imports_of_every_kind(self):
        serve = "modefsm.cli._serve"  # the HTTP transport: inside _serve_http
        assert ("modefsm.protocol.transport", False) in set(imports(serve))
        assert ("modefsm.errors", True) in set(imports(serve))
        facade = "modefsm"  # its TYPE_CHECKING block
        assert ("modefsm.errors", False) in set(imports(facade))

    def test_no_stage_below_the_protocol_imports_the_sdk(self):
        """The engine, spec, log, store, replay and diagram speak modefsm's own types: only
        ``modefsm.protocol`` and above import ``acp`` (any kind of import, anywhere)."""
        below = [m for m in MODULES if LAYERS[stage(m)] < LAYERS["modefsm.protocol"]]
        assert "modefsm.engine._engine" in below
        found = sorted((m, name) for m in below for name in sdk_imports(m))
        assert found == []
        assert sdk_imports("modefsm.protocol.v1._render") == ["acp.schema"]  # the check sees

    def test_packages_use_each_other_through_their_faces(self):
        """An import of another package's ``_private`` module is one of the few allowed."""
        assert private_imports() == set(PRIVATE_ALLOWED)

    def test_the_private_import_check_sees_one(self):
        assert ("modefsm.store._file", "modefsm.log._writer") in private_imports()
        assert ("modefsm.engine._engine", "modefsm.engine._machine") not in private_imports()

    def test_find_cycle_finds_one(self):
        assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
        assert find_cycle({"a": {"b"}, "b": set()}) is None


PACKAGES = sorted(m for m, p in MODULES.items() if p.name == "__init__.py" and m != "modefsm")

LAZY_NAMES = {
    # ACP v2's schema doubles start-up: loaded when a v2 client initializes (modefsm.ModeAgentV2)
    "modefsm.protocol": {"ModeAgentV2", "V2_PROTOCOL_VERSION"},
    # psycopg is optional (the postgresql extra): loaded by open_store("postgresql://...")
    "modefsm.store": {"PgStore", "SCHEMA_VERSION"},
}
"""Names of modules a package does not import, and why."""


def _sorted_all(names: list[str]) -> list[str]:
    """ruff's order of ``__all__``: SCREAMING_CASE, then CamelCase, then the rest."""

    def key(name: str) -> tuple[int, str]:
        if name.isupper() or (name.upper() == name and "_" in name):
            return (0, name)
        return (1, name) if name[:1].isupper() else (2, name)

    return sorted(names, key=key)


class TestExports:
    @pytest.mark.parametrize("package", PACKAGES)
    def test_package_all_is_sorted_and_the_union_of_its_modules(self, package: str):
        """A package re-exports exactly its private modules' and subpackages' ``__all__``.

        Two exceptions: ``modefsm.spec.presets`` holds data only, and ``modefsm.cli``
        exports only ``main`` (each command's module is imported when it runs, so that
        ``modefsm --help`` loads no protocol).
        """
        module = importlib.import_module(package)
        exported: list[str] = list(getattr(module, "__all__", []))
        assert exported == _sorted_all(exported)
        folder = MODULES[package].parent
        union: set[str] = set()
        for path in sorted(folder.glob("_*.py")):
            if path.name != "__init__.py":
                union |= set(importlib.import_module(module_name(path)).__all__)
        for path in sorted(folder.glob("[!_]*/__init__.py")):  # subpackages: their exports
            if path.parent.name != "presets":  # data only
                union |= set(importlib.import_module(module_name(path)).__all__)
        if package == "modefsm.cli":
            union &= {"main"}
        union -= LAZY_NAMES.get(package, set())
        assert set(exported) == union
        for name in exported:
            assert hasattr(module, name), f"{package}.{name}"

    def test_every_private_module_declares_all(self):
        missing = [
            m
            for m, p in MODULES.items()
            if p.name.startswith("_")
            and p.name not in {"__init__.py", "__main__.py"}
            and "__all__" not in p.read_text(encoding="utf-8")
        ]
        assert missing == []

    def test_top_level_names_are_in_exports_type_checking_and_all(self):
        tree = ast.parse(MODULES["modefsm"].read_text(encoding="utf-8"))
        checked: set[str] = set()
        for node in tree.body:
            if isinstance(node, ast.If) and _is_type_checking(node):
                for imp in node.body:
                    assert isinstance(imp, ast.ImportFrom)
                    if imp.module and imp.module.startswith("modefsm"):  # not typing's Any
                        checked |= {a.asname or a.name for a in imp.names}
        assert set(modefsm.__all__) == set(modefsm._EXPORTS) == checked
        assert modefsm.__all__ == _sorted_all(modefsm.__all__)

    def test_every_public_name_imports_from_where_exports_says(self):
        code = (
            "import modefsm, importlib\n"
            "for name, where in modefsm._EXPORTS.items():\n"
            "    value = getattr(modefsm, name)\n"
            "    assert value is getattr(importlib.import_module(where), name), name\n"
            "print(len(modefsm._EXPORTS))\n"
        )
        result = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, check=False
        )
        assert result.returncode == 0, result.stderr
        assert result.stdout == f"{len(modefsm.__all__)}\n"


def _declared_imports(package: str) -> set[str]:
    """The stages a package's docstring says it may import (its ``May import:`` paragraph)."""
    doc = ast.get_docstring(ast.parse(MODULES[package].read_text(encoding="utf-8"))) or ""
    paragraph = next((p for p in doc.split("\n\n") if p.startswith("May import:")), None)
    assert paragraph is not None, f"{package}: no 'May import:' paragraph"
    return {name.removeprefix("modefsm.") for name in re.findall(r"``([\w.]+)``", paragraph)}


def _used_stages(package: str) -> set[str]:
    """The stages (and ``_lazy``) the modules of *package* import from outside it."""
    inside = [m for m in MODULES if m == package or m.startswith(package + ".")]
    found: set[str] = set()
    for module in inside:
        for target, _ in imports(module):
            if target != package and not target.startswith(package + "."):
                found.add(stage(target).removeprefix("modefsm."))
    return found


class TestFaces:
    """Each package's docstring says what the stage is, what it exports, what it imports."""

    @pytest.mark.parametrize("package", PACKAGES)
    def test_the_face_names_the_stages_it_imports(self, package: str):
        assert _declared_imports(package) == _used_stages(package)

    @pytest.mark.parametrize("package", PACKAGES)
    def test_the_face_says_what_it_exports(self, package: str):
        doc = ast.get_docstring(ast.parse(MODULES[package].read_text(encoding="utf-8"))) or ""
        assert "\n\nExports" in doc
        assert "documentation's Architecture page" not in doc  # says it here, not elsewhere

    def test_the_check_sees_an_import(self):
        assert _used_stages("modefsm.engine") == {"errors", "spec", "log", "store"}


ARCHITECTURE = PACKAGE.parent / "docs" / "architecture.md"


def documented_tree(text: str) -> dict[str, str]:
    """The tree of the architecture page: ``{path: description}``, packages ending in ``/``.

    The tree is the ``text`` block that starts with ``modefsm/``; each line is a name
    indented two spaces per level, then its description.
    """
    block = text.split("```text\nmodefsm/", 1)[1].split("```", 1)[0]
    tree: dict[str, str] = {}
    folders: list[str] = []
    for line in ("modefsm/" + block).splitlines():
        depth = (len(line) - len(line.lstrip(" "))) // 2
        name, _, description = line.strip().partition(" ")
        folders[depth:] = []
        path = "".join(folders) + name
        tree[path] = description.strip()
        if name.endswith("/"):
            folders.append(name)
    return tree


def code_tree() -> set[str]:
    """Every package (``modefsm/spec/``) and module (``modefsm/spec/_model.py``) of the code."""
    root = PACKAGE.parent
    return {
        (p.parent.relative_to(root).as_posix() + "/")
        if p.name == "__init__.py"
        else p.relative_to(root).as_posix()
        for p in PACKAGE.rglob("*.py")
    }


class TestArchitecturePage:
    """docs/architecture.md shows every package and module, one line each."""

    def test_the_tree_matches_the_code(self):
        tree = documented_tree(ARCHITECTURE.read_text(encoding="utf-8"))
        assert sorted(tree) == sorted(code_tree())

    def test_every_line_says_what_it_is(self):
        tree = documented_tree(ARCHITECTURE.read_text(encoding="utf-8"))
        assert [path for path, description in tree.items() if not description] == []

    def test_the_parser_reads_nesting(self):
        text = "```text\nmodefsm/  facade\n  a/  stage\n    _b.py  module\n  c.py  top\n```"
        assert documented_tree(text) == {
            "modefsm/": "facade",
            "modefsm/a/": "stage",
            "modefsm/a/_b.py": "module",
            "modefsm/c.py": "top",
        }


class TestOldPaths:
    def test_the_old_module_paths_are_gone(self):
        """``modefsm.agent`` and ``modefsm.wire`` were deprecated shims, never released."""
        for old in ("modefsm.agent", "modefsm.wire"):
            with pytest.raises(ModuleNotFoundError):
                importlib.import_module(old)

    def test_new_paths_do_not_warn(self):
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            assert modefsm.ModeAgent is importlib.import_module("modefsm.protocol").ModeAgent
