"""The benchmarks' output: Markdown tables, as ``make bench`` prints them and docs/performance.md quotes them."""

from __future__ import annotations

from collections.abc import Sequence


def table(
    headers: tuple[str, ...], rows: Sequence[tuple[str, ...]], *, text: frozenset[int] = frozenset({0})
) -> list[str]:
    """A Markdown table; the columns in ``text`` left-aligned, the others (numbers) right-aligned."""
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(headers)]

    def line(cells: tuple[str, ...]) -> str:
        padded = (c.ljust(w) if i in text else c.rjust(w) for i, (c, w) in enumerate(zip(cells, widths, strict=True)))
        return "| " + " | ".join(padded) + " |"

    return [line(headers), "|" + "|".join("-" * (w + 2) for w in widths) + "|", *(line(r) for r in rows)]
