"""An import-linter contract type: no two modules import each other, directly or through others.

import-linter 2.16's own cycle contract (``acyclic_siblings``) judges packages: ``shared.app`` (settings
below, the composition root above) and ``shared.handlers`` import each other as packages without any
module ever importing itself back. The cycles that hurt are between modules (the one that had a
function-level import hide it: rule "no import cycles" in issue 27), so this contract finds strongly
connected components of the module graph. An import inside a function or under ``TYPE_CHECKING`` counts:
it is how a cycle is usually hidden.

Registered in ``pyproject.toml`` (``contract_types``); ``lint-imports`` runs it with the others.
"""

from __future__ import annotations

from typing import Any

import grimp
from importlinter import Contract, ContractCheck, fields, output
from importlinter.application import contract_utils
from importlinter.application.contract_utils import AlertLevel


class AcyclicModulesContract(Contract):
    """Kept when no module under ``containers`` reaches itself through the imports between modules
    under ``containers`` (after ``ignore_imports`` are removed)."""

    type_name = "acyclic_modules"

    containers = fields.ListField(subfield=fields.StringField())
    ignore_imports = fields.SetField(subfield=fields.ImportExpressionField(), required=False)
    unmatched_ignore_imports_alerting = fields.EnumField(AlertLevel, default=AlertLevel.ERROR)

    def check(self, graph: grimp.ImportGraph, verbose: bool) -> ContractCheck:
        removal = contract_utils.remove_ignored_imports_and_report(
            graph=graph,
            ignore_imports=self.ignore_imports,  # type: ignore[arg-type]
            unmatched_alerting=self.unmatched_ignore_imports_alerting,  # type: ignore[arg-type]
        )
        containers: list[str] = list(self.containers)  # type: ignore[call-overload]
        modules = {m for m in graph.modules if any(m == c or m.startswith(c + ".") for c in containers)}
        cycles = [
            [
                {
                    "importer": a,
                    "imported": b,
                    "lines": [d["line_number"] for d in graph.get_import_details(importer=a, imported=b)],
                }
                for a in sorted(component)
                for b in sorted(graph.find_modules_directly_imported_by(a) & component)
            ]
            for component in strongly_connected(graph, modules)
        ]
        return ContractCheck(
            kept=not cycles,
            warnings=list(removal.warnings),
            ignored_import_count=removal.ignored_import_count,
            metadata={"cycles": cycles},
        )

    def render_broken_contract(self, check: ContractCheck) -> None:
        for cycle in check.metadata["cycles"]:
            output.print_error(f"These {len({i['importer'] for i in cycle})} modules import each other:")
            for edge in cycle:
                lines = ", ".join(str(n) for n in edge["lines"])
                output.print_error(f"  {edge['importer']} -> {edge['imported']} (l. {lines})", bold=False)
            output.new_line()


def strongly_connected(graph: grimp.ImportGraph, modules: set[str]) -> list[set[str]]:
    """The components of more than one module (Tarjan's algorithm, iterative: no recursion limit)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    found: list[set[str]] = []
    for root in sorted(modules):
        if root in index:
            continue
        work: list[tuple[str, Any]] = [(root, None)]
        while work:
            node, successors = work[-1]
            if successors is None:
                index[node] = low[node] = len(index)
                stack.append(node)
                on_stack.add(node)
                successors = iter(sorted(graph.find_modules_directly_imported_by(node) & modules))
                work[-1] = (node, successors)
            pushed = False
            for successor in successors:
                if successor not in index:
                    work.append((successor, None))
                    pushed = True
                    break
                if successor in on_stack:
                    low[node] = min(low[node], index[successor])
            if pushed:
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                component: set[str] = set()
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.add(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(component)
    return found
