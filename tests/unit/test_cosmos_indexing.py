"""The Cosmos DB indexing policy (``infra/app/cosmos.bicep``) serves every query the code builds.

The queries are not listed by hand: every ``Query(...)`` the product code constructs (``shared/``,
``casekeeper/``, ``function_app.py``) is found in its syntax tree, with the container of the store call it is
passed to, and turned into the Cosmos SQL the Cosmos store sends (``casekeeper.stores.cosmos.build_query``).
Each path that SQL filters, orders or groups on must be included by the container's policy, an ``ORDER BY``
on two or more paths needs its composite index, and a query that filters on equality and orders needs a
composite index of the filtered paths followed by the ordered ones (what keeps the sweep queries from
scanning). A query the extraction cannot read (``equals`` built from outside the function, a new ``Query``
field that is not a literal) fails the test with its location, rather than being skipped.

The policy is also held to include only what some query uses, so it stays the opt-in policy it claims.
"""

from __future__ import annotations

import ast
import importlib
import itertools
import re
from collections.abc import Iterator
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any

import pytest
import tree_sitter

from casekeeper.core.ports import CONTAINERS, Query
from casekeeper.stores.cosmos import build_query
from tests.unit.test_infra import APP, _body, _path, _string, _text, declared, resources_of_type

ROOT = Path(__file__).resolve().parents[2]
PRODUCT_SOURCES = (ROOT / "shared", ROOT / "casekeeper", ROOT / "function_app.py")
ALWAYS_INDEXED = frozenset({"id"})
"""Cosmos DB indexes ``id`` whatever the policy says (documented for consistent indexing)."""
_REVERSED = {"ascending": "descending", "descending": "ascending"}


# -- the policy, from the Bicep --


def bicep_value(node: tree_sitter.Node) -> Any:
    """A Bicep literal (object, array, string, number, boolean, null) as a Python value."""
    if node.type == "object":
        value: dict[str, Any] = {}
        for prop in node.named_children:
            if prop.type == "object_property":
                key = prop.named_children[0]
                name = _string(key) if key.type == "string" else (key.text or b"").decode()
                assert name is not None
                value[name] = bicep_value(prop.named_children[-1])
        return value
    if node.type == "array":
        return [bicep_value(child) for child in node.named_children if child.type != "comment"]
    if node.type == "string":
        text = _string(node)
        assert text is not None, f"interpolated string in a policy: {node.text!r}"
        return text
    raw = (node.text or b"").decode()
    if node.type == "boolean":
        return raw == "true"
    if node.type == "number":
        return int(raw)
    if node.type == "null":
        return None
    raise AssertionError(f"not a literal in the indexing policy: {node.type} {raw[:60]!r}")


def policies() -> dict[str, dict[str, Any]]:
    """Container name -> its indexing policy, as written in infra/app/cosmos.bicep."""
    value = declared(APP / "cosmos.bicep", "var")["containers"].value
    assert value is not None
    return {entry["name"]: entry["indexingPolicy"] for entry in bicep_value(value)}


# -- the queries, from the code --


@dataclass(frozen=True)
class Site:
    """One ``Query(...)`` in the code: where it is, the container it is sent to, and one concrete query
    per variant (a non-literal ``order_by_ts`` gives both directions)."""

    where: str
    container: str
    queries: tuple[Query, ...]


class Unreadable(AssertionError):
    """A ``Query(...)`` whose shape the extraction cannot tell: rewrite it inline, or teach this test."""


def _is_query_call(node: ast.AST) -> bool:
    if not isinstance(node, ast.Call):
        return False
    func = node.func
    return (isinstance(func, ast.Name) and func.id == "Query") or (
        isinstance(func, ast.Attribute) and func.attr == "Query"
    )


def _parents(tree: ast.AST) -> dict[ast.AST, ast.AST]:
    return {child: parent for parent in ast.walk(tree) for child in ast.iter_child_nodes(parent)}


def _enclosing_function(node: ast.AST, parents: dict[ast.AST, ast.AST]) -> ast.AST:
    while node in parents and not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
        node = parents[node]
    return node


def _keys_assigned(name: str, scope: ast.AST, where: str) -> set[str]:
    """Every key a dict named ``name`` can hold in ``scope``: keys of dict literals assigned to it (either
    branch of a conditional included) and keys set with ``name["key"] = ...``."""
    keys: set[str] = set()
    found = False
    for node in ast.walk(scope):
        targets: list[ast.expr] = []
        value: ast.expr | None = None
        if isinstance(node, ast.Assign):
            targets, value = node.targets, node.value
        elif isinstance(node, ast.AnnAssign) and node.value is not None:
            targets, value = [node.target], node.value
        for target in targets:
            if isinstance(target, ast.Name) and target.id == name and value is not None:
                found = True
                for literal in (n for n in ast.walk(value) if isinstance(n, ast.Dict)):
                    keys |= _literal_keys(literal, where)
            if isinstance(target, ast.Subscript) and isinstance(target.value, ast.Name) and target.value.id == name:
                if not (isinstance(target.slice, ast.Constant) and isinstance(target.slice.value, str)):
                    raise Unreadable(f"{where}: {name}[...] set with a computed key")
                keys.add(target.slice.value)
    if not found:
        raise Unreadable(f"{where}: equals={name} is not built in this function")
    return keys


def _literal_keys(literal: ast.Dict, where: str) -> set[str]:
    keys: set[str] = set()
    for key in literal.keys:
        if not (isinstance(key, ast.Constant) and isinstance(key.value, str)):
            raise Unreadable(f"{where}: equals has a computed key or **")
        keys.add(key.value)
    return keys


def _equals_keys(value: ast.expr, scope: ast.AST, where: str) -> set[str]:
    if isinstance(value, ast.Dict):
        return _literal_keys(value, where)
    if isinstance(value, ast.Name):
        return _keys_assigned(value.id, scope, where)
    raise Unreadable(f"{where}: equals={ast.unparse(value)} is neither a dict literal nor a local name")


def _variants(call: ast.Call, scope: ast.AST, where: str) -> tuple[Query, ...]:
    """Concrete queries with the shape of ``call``: values do not matter to the index, only which fields
    are filtered and how the result is ordered."""
    if call.args:
        raise Unreadable(f"{where}: Query(...) with positional arguments")
    known = {f.name for f in fields(Query)}
    base: dict[str, Any] = {}
    orders: tuple[Any, ...] = (None,)
    for keyword in call.keywords:
        name, value = keyword.arg, keyword.value
        if name is None or name not in known:
            raise Unreadable(f"{where}: Query field {name!r} unknown to this test")
        literal_none = isinstance(value, ast.Constant) and value.value is None
        if name == "equals":
            base[name] = dict.fromkeys(sorted(_equals_keys(value, scope, where)), "v")
        elif name == "order_by_ts":
            orders = (value.value,) if isinstance(value, ast.Constant) else ("asc", "desc")
        elif name == "partition":
            base[name] = None if literal_none else "p"
        elif name in ("ts_before", "ts_after"):
            base[name] = None if literal_none else 1.0
        elif name == "limit":
            base[name] = None if literal_none else 10
        elif isinstance(value, ast.Constant):
            base[name] = value.value  # a field added to Query later: its literal goes to build_query
        else:
            raise Unreadable(f"{where}: Query field {name!r} is not a literal; teach this test its shape")
    return tuple(Query(**base, order_by_ts=order) for order in orders)


def _container_expressions(call: ast.Call, parents: dict[ast.AST, ast.AST], scope: ast.AST) -> list[ast.expr]:
    """The container argument of the call(s) the query goes to, which by the house convention comes just
    before the query: ``store.query(C, Query(...))``, ``next_page(store, C, q, size)``, or ``q = Query(...)``
    then ``store.count(C, q)`` in the same function."""
    parent = parents.get(call)
    if isinstance(parent, ast.keyword):  # store.query(C, query=Query(...))
        call, parent = parent.value, parents.get(parent)  # type: ignore[assignment]
        if isinstance(parent, ast.Call) and parent.args:
            return [parent.args[0]]
    if isinstance(parent, ast.Call) and call in parent.args and parent.args[0] is not call:
        return [_nearest_container(parent.args[: parent.args.index(call)])]
    if isinstance(parent, (ast.Assign, ast.AnnAssign)):
        targets = parent.targets if isinstance(parent, ast.Assign) else [parent.target]
        names = {t.id for t in targets if isinstance(t, ast.Name)}
        return [
            _nearest_container(node.args[:i])
            for node in ast.walk(scope)
            if isinstance(node, ast.Call)
            for i, a in enumerate(node.args)
            if i >= 1 and isinstance(a, ast.Name) and a.id in names
        ]
    return []


PAGERS = {"next_page", "walk", "walk_pages", "_walk"}
"""Functions that page a query (``casekeeper.core.ports.next_page`` and what calls it): they send it with
``paged=True``, ordered by ``(_ts, id)``."""


def _handed_to_a_pager(call: ast.Call, parents: dict[ast.AST, ast.AST], scope: ast.AST) -> bool:
    def pager(node: ast.AST | None) -> bool:
        if not isinstance(node, ast.Call):
            return False
        name = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
        return name in PAGERS

    parent = parents.get(call)
    if pager(parent):
        return True
    if isinstance(parent, (ast.Assign, ast.AnnAssign)):
        targets = parent.targets if isinstance(parent, ast.Assign) else [parent.target]
        names = {t.id for t in targets if isinstance(t, ast.Name)}
        return any(
            pager(node) and any(isinstance(a, ast.Name) and a.id in names for a in node.args)  # type: ignore[attr-defined]
            for node in ast.walk(scope)
        )
    return False


def _nearest_container(before: list[ast.expr]) -> ast.expr:
    """Of the arguments before the query, the nearest that names a container: a string literal or an
    upper-case module constant (``EFFECTS``, ``HEALTH``); else the one just before (reported if unreadable)."""
    for arg in reversed(before):
        if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
            return arg
        if isinstance(arg, ast.Name) and arg.id.isupper():
            return arg
        if isinstance(arg, ast.Attribute) and arg.attr.isupper():
            return arg
    return before[-1]


def sites_in(source: str, where: str, namespace: dict[str, Any]) -> Iterator[Site]:
    """Every ``Query(...)`` in ``source``; ``namespace`` resolves container names (module constants)."""
    tree = ast.parse(source)
    parents = _parents(tree)
    for node in ast.walk(tree):
        if not _is_query_call(node):
            continue
        assert isinstance(node, ast.Call)
        at = f"{where}:{node.lineno}"
        scope = _enclosing_function(node, parents)
        expressions = _container_expressions(node, parents, scope)
        if not expressions:
            raise Unreadable(f"{at}: cannot tell which container this Query is sent to")
        for expression in expressions:
            try:
                container = eval(ast.unparse(expression), dict(namespace))  # a constant or a module-level name
            except NameError as exc:
                raise Unreadable(f"{at}: the container {ast.unparse(expression)} is not a module constant") from exc
            if container not in CONTAINERS:
                raise Unreadable(f"{at}: container {container!r} is not one of {sorted(CONTAINERS)}")
            variants = _variants(node, scope, at)
            if _handed_to_a_pager(node, parents, scope):  # next_page / walk add paged=True: ORDER BY _ts, id
                variants += tuple(replace(v, paged=True, order_by_ts=None) for v in variants)
            yield Site(at, container, variants)


def product_sites() -> list[Site]:
    found: list[Site] = []
    files = [p for source in PRODUCT_SOURCES for p in ([source] if source.is_file() else source.rglob("*.py"))]
    for path in sorted(files):
        source = path.read_text()
        if "Query(" not in source:
            continue
        relative = path.relative_to(ROOT)
        module = importlib.import_module(".".join(relative.with_suffix("").parts))
        found.extend(sites_in(source, relative.as_posix(), vars(module)))
    return found


# -- what a query needs from the index --

_REF = r'c\["(\w+)"\]|c\.(\w+)'


@dataclass(frozen=True)
class Needs:
    paths: frozenset[str]
    """Every path filtered, ordered or grouped on."""
    equalities: frozenset[str]
    """Paths compared with ``=`` (the partition key of a single-partition query left out)."""
    order: tuple[tuple[str, str], ...]
    """``ORDER BY`` as (path, ascending|descending)."""


def _refs(text: str) -> list[str]:
    return [a or b for a, b in re.findall(_REF, text)]


def needs(sql: str, *, partition_field: str | None) -> Needs:
    """What ``sql`` (as ``build_query`` writes it) asks of the index. ``partition_field``: the partition key
    field of a single-partition query, whose equality routes the query rather than filters it."""
    clauses = re.split(r"\s+(WHERE|ORDER BY|GROUP BY)\s+", sql)
    parts = dict(zip(clauses[1::2], clauses[2::2], strict=True))
    equalities: set[str] = set()
    for condition in re.split(r"\s+AND\s+", parts.get("WHERE", "")):
        match = re.fullmatch(rf"(?:{_REF})\s*=\s*@\w+", condition.strip())
        if match and (match.group(1) or match.group(2)) != partition_field:
            equalities.add(match.group(1) or match.group(2))
    order: list[tuple[str, str]] = []
    for item in filter(None, (i.strip() for i in parts.get("ORDER BY", "").split(","))):
        [path] = _refs(item)
        order.append((path, "descending" if item.upper().endswith(" DESC") else "ascending"))
    paths = set(_refs(parts.get("WHERE", ""))) | {p for p, _ in order} | set(_refs(parts.get("GROUP BY", "")))
    return Needs(frozenset(paths), frozenset(equalities), tuple(order))


def _matches(pattern: str, path: str) -> int:
    """How specifically an index path pattern covers ``/path/?`` (0: it does not)."""
    if pattern == f"/{path}/?":
        return 3
    if pattern == f"/{path}/*":
        return 2
    return 1 if pattern == "/*" else 0


def indexed(policy: dict[str, Any], path: str) -> bool:
    """Whether the policy indexes ``path``; the most specific include or exclude wins."""
    if path in ALWAYS_INDEXED:
        return True
    include = max((_matches(p["path"], path) for p in policy.get("includedPaths", [])), default=0)
    exclude = max((_matches(p["path"], path) for p in policy.get("excludedPaths", [])), default=0)
    return include > exclude


def _composites(policy: dict[str, Any]) -> list[tuple[tuple[str, str], ...]]:
    return [tuple((p["path"].lstrip("/"), p.get("order", "ascending")) for p in c) for c in policy["compositeIndexes"]]


def composite_for(policy: dict[str, Any], need: Needs) -> tuple[tuple[str, str], ...] | bool | None:
    """The composite index ``need`` uses; ``True`` when it needs none, ``None`` when it lacks one.

    Two or more ordered paths need a composite index on exactly them, in order, with the same directions or
    all reversed. Equality filters with an ordering need the filtered paths first (any order, any
    direction: an equality leaves one value), then the ordered ones."""
    if not need.order or (len(need.order) == 1 and not need.equalities):
        return True
    wanted = tuple(need.order)
    reversed_ = tuple((p, _REVERSED[o]) for p, o in wanted)
    for composite in _composites(policy):
        head, tail = composite[: len(need.equalities)], composite[len(need.equalities) :]
        if {p for p, _ in head} == need.equalities and tail in (wanted, reversed_):
            return composite
    return None


def problems(site_queries: list[tuple[str, str, str, str | None]], policy_of: dict[str, dict[str, Any]]) -> list[str]:
    """Every (where, container, sql, partition field) the policies do not serve, one line each."""
    found: list[str] = []
    for where, container, sql, partition_field in site_queries:
        need = needs(sql, partition_field=partition_field)
        policy = policy_of[container]
        for path in sorted(need.paths):
            if not indexed(policy, path):
                found.append(f"{where}: {container} does not index /{path}/? ({sql})")
        if composite_for(policy, need) is None:
            fields_ = [*sorted(need.equalities), *(f"{p} {o}" for p, o in need.order)]
            found.append(f"{where}: {container} has no composite index ({', '.join(fields_)}) for {sql}")
    return found


def _partition_field(container: str, query: Query) -> str | None:
    return CONTAINERS[container] if query.partition is not None else None


def _site_queries(sites: list[Site]) -> list[tuple[str, str, str, str | None]]:
    return [
        (
            site.where,
            site.container,
            build_query(site.container, q)[0],
            CONTAINERS[site.container] if q.partition else None,
        )
        for site in sites
        for q in site.queries
    ]


# -- the tests --


def test_the_code_builds_queries_on_every_container_the_policy_covers() -> None:
    sites = product_sites()
    assert len(sites) >= 10, f"found only {len(sites)} queries: the extraction lost some"
    assert {s.container for s in sites} == set(CONTAINERS)


def test_every_query_the_code_builds_is_served_by_the_indexing_policy() -> None:
    found = problems(_site_queries(product_sites()), policies())
    assert not found, "add these to infra/app/cosmos.bicep:\n" + "\n".join(found)


def test_the_policies_are_opt_in_and_include_only_what_a_query_uses() -> None:
    policy_of = policies()
    assert set(policy_of) == {*CONTAINERS, "leases"}
    used_paths: dict[str, set[str]] = {name: set() for name in CONTAINERS}
    used_composites: dict[str, set[tuple[tuple[str, str], ...]]] = {name: set() for name in CONTAINERS}
    for _where, container, sql, partition_field in _site_queries(product_sites()):
        need = needs(sql, partition_field=partition_field)
        used_paths[container] |= need.paths
        composite = composite_for(policy_of[container], need)
        if isinstance(composite, tuple):
            used_composites[container].add(composite)
    for name in CONTAINERS:
        policy = policy_of[name]
        assert policy["indexingMode"] == "consistent"
        assert [p["path"] for p in policy["excludedPaths"]] == ["/*"], f"{name}: not an opt-in policy"
        included = {p["path"] for p in policy["includedPaths"]}
        unused = sorted(included - {f"/{p}/?" for p in used_paths[name]})
        assert not unused, f"{name}: no query uses {unused}; drop them (each indexed path costs every write)"
        idle = sorted(set(_composites(policy)) - used_composites[name])
        assert not idle, f"{name}: no query uses the composite index(es) {idle}"
    # The lease container keeps the default policy (the trigger's library queries it).
    assert [p["path"] for p in policy_of["leases"]["includedPaths"]] == ["/*"]


def test_every_container_resource_takes_its_policy_and_turns_time_to_live_on() -> None:
    (resource,) = resources_of_type(
        APP / "cosmos.bicep", "Microsoft.DocumentDB/databaseAccounts/sqlDatabases/containers@"
    )
    properties = _path(_body(resource.value), "properties", "resource")
    assert _text(_path(properties, "indexingPolicy")) == "container.indexingPolicy"
    # -1: expiry on, no default; only documents with their own ttl expire (shared/app/retention.py).
    assert _text(_path(properties, "defaultTtl")) == "-1"


SWEEP = """
def overdue(store):
    return store.query("effects", Query(equals={"status": "started"}, ts_before=1.0, order_by_ts="asc"))
"""


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        (
            'def f(store):\n    return store.query("cases", Query(equals={"supplierId": "s"}))\n',
            "cases does not index /supplierId/?",
        ),
        (
            'def f(store):\n    q = Query(equals={"facts": 1}, order_by_ts="desc")\n'
            '    return store.query("effects", q)\n',
            "effects does not index /facts/?",
        ),
        (
            'def f(store, flag):\n    eq = {}\n    eq["notified"] = flag\n    eq["caseId"] = "c"\n'
            '    return store.query("health", Query(partition="alert", equals=eq, order_by_ts="asc"))\n',
            "health has no composite index (caseId, notified, _ts ascending)",
        ),
    ],
    ids=["unindexed-field", "unindexed-via-variable", "missing-composite"],
)
def test_a_new_query_on_an_unindexed_field_fails_the_check(source: str, expected: str) -> None:
    sites = list(sites_in(source, "new.py", {"Query": Query}))
    found = problems(_site_queries(sites), policies())
    assert any(expected in line for line in found), found
    # The same extraction passes a sweep the policy does serve.
    assert problems(_site_queries(list(sites_in(SWEEP, "ok.py", {"Query": Query}))), policies()) == []


def test_an_order_by_on_two_paths_needs_its_composite_index() -> None:
    policy: dict[str, Any] = {"includedPaths": [{"path": "/*"}], "excludedPaths": [], "compositeIndexes": []}
    sql = 'SELECT * FROM c ORDER BY c["status"] ASC, c._ts DESC'
    assert problems([("x", "cases", sql, None)], {"cases": policy})
    policy["compositeIndexes"] = [[{"path": "/status", "order": "descending"}, {"path": "/_ts", "order": "ascending"}]]
    assert problems([("x", "cases", sql, None)], {"cases": policy}) == []  # all reversed serves it too
    policy["compositeIndexes"] = [[{"path": "/status", "order": "ascending"}, {"path": "/_ts", "order": "ascending"}]]
    assert problems([("x", "cases", sql, None)], {"cases": policy})


def test_unreadable_queries_fail_with_their_location() -> None:
    with pytest.raises(Unreadable, match=r"new\.py:2"):
        list(sites_in("def f(store, eq):\n    return store.query('cases', Query(equals=eq))\n", "new.py", {}))
    keyword = "def f(store):\n    return store.query('cases', query=Query(equals={'status': 'open'}))\n"
    [site] = sites_in(keyword, "new.py", {"Query": Query})
    assert site.container == "cases"
    with pytest.raises(Unreadable, match="container"):
        list(sites_in("def f():\n    return Query(limit=1)\n", "new.py", {}))


@pytest.mark.parametrize(
    ("pattern_paths", "path", "expected"),
    [
        ((["/status/?"], ["/*"]), "status", True),
        ((["/status/?"], ["/*"]), "history", False),
        ((["/*"], ['/"_etag"/?']), "anything", True),
        ((["/*"], ["/facts/*"]), "facts", False),
        ((["/facts/*"], ["/*"]), "facts", True),
    ],
)
def test_include_and_exclude_precedence(pattern_paths: tuple[list[str], list[str]], path: str, expected: bool) -> None:
    include, exclude = pattern_paths
    policy = {"includedPaths": [{"path": p} for p in include], "excludedPaths": [{"path": p} for p in exclude]}
    assert indexed(policy, path) is expected


def test_needs_reads_the_sql_build_query_writes() -> None:
    query = Query(partition="alert", equals={"notified": False}, ts_after=3.0, order_by_ts="desc", limit=5)
    sql, _ = build_query("health", query)
    need = needs(sql, partition_field="kind")
    assert need == Needs(frozenset({"kind", "notified", "_ts"}), frozenset({"notified"}), (("_ts", "descending"),))
    assert list(itertools.chain(*(s.queries for s in sites_in(SWEEP, "ok.py", {"Query": Query})))) == [
        Query(equals={"status": "v"}, ts_before=1.0, order_by_ts="asc")
    ]
