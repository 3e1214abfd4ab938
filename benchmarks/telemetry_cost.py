"""What tracing costs per case, in CPU: as shipped, with the defaults of issue 13, and without tracing.

``python -m benchmarks.telemetry_cost [--cases 8] [--rounds 10] [--repeat 3] [--variants a,b,...]``

One *case* is an ``invoice.received`` over-billed by 100.00: the ``events`` function (the webhook: HMAC
check, one message on the queue) then the ``case_worker`` function (the workflow: intake, propose,
approval gate, commit with one supplier call and its ledger rows), both the indexed functions
``function_app`` exposes, invoked as ``tests/triggers`` invokes them, on SQLite and the local session
queue. A *round* is ``--cases`` cases: their webhook calls one after the other, then their messages
handled concurrently (``asyncio.gather`` over the worker, as a host with ``maxConcurrentSessions`` runs
them), then the span processor flushed, so the export is paid inside the round.

Each variant runs in an interpreter of its own, through ``shared.app.telemetry.configure()`` as the app
runs it (telemetry providers are process-wide and set once): the console exporter, batched
(``BatchSpanProcessor``), writing to ``/dev/null``, stands in for an exporter's encoding. The figure is
``time.process_time()`` over the round (every thread of the process: the worker's threads, the batch
exporter's) divided by the cases. The supplier stub runs in this, the parent, process, so its CPU is not
counted. Variants are run ``--repeat`` times, interleaved, after warm-up rounds that are not counted;
the table shows the median round and the spread (25th-75th percentile) over all counted rounds. Then a
few rounds more, not timed, count the spans a case exports (an in-memory exporter beside the console).

Variants (``AGENT_FRAMEWORK_SPANS`` / ``TRACE_SAMPLING_RATIO``):

``shipped``      ``true`` / ``1``: what ran before issue 13 (the framework's spans on, every trace kept);
                 it has one more Casekeeper span (``propose``) than the shipped code had.
``default``      ``false`` / ``1``: the local default now.
``azure``        ``false`` / ``0.25``: what ``infra/`` sets.
``ratio-0.1``    ``false`` / ``0.1``.
``ratio-0``      ``false`` / ``0``: every trace dropped; what configured tracing costs with nothing to export.
``no-tracing``   no tracer provider at all and the framework's spans off: the floor.

The numbers are this machine's; the differences between variants are the point. Exit status 0 when
every case of every variant ended ``credit_requested``, 1 otherwise.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import secrets
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

QUEUE = "case-events"
COUNTING_ROUNDS = 4


@dataclass(frozen=True)
class Variant:
    name: str
    framework_spans: bool
    ratio: float | None
    """``None``: tracing not configured at all."""


VARIANTS = {
    v.name: v
    for v in (
        Variant("shipped", True, 1.0),
        Variant("default", False, 1.0),
        Variant("azure", False, 0.25),
        Variant("ratio-0.1", False, 0.1),
        Variant("ratio-0", False, 0.0),
        Variant("no-tracing", False, None),
    )
}


def _invoice(case_id: str) -> dict[str, str]:
    return {
        "invoiceId": case_id,
        "supplierId": "S-1",
        "poNumber": "PO-1",
        "invoiceAmount": "1100.00",
        "poAmount": "1000.00",
        "currency": "EUR",
    }


# --- the child: one variant, in its own interpreter ------------------------------------------------


@dataclass
class App:
    """The app as one process of the host runs it: configured telemetry, services, the indexed functions."""

    services: Any
    events: Callable[..., Any]
    worker: Callable[..., Any]
    queue: Any
    provider: Any
    secret: str


def open_app(variant: Variant, supplier_url: str) -> App:
    from opentelemetry import trace

    import function_app
    from shared.app import bootstrap
    from shared.app.settings import Settings
    from shared.app.telemetry import configure, use_framework_spans
    from shared.messaging.sqlite_queue import LocalSessionQueue

    tmp = Path(tempfile.mkdtemp(prefix="telemetry-cost-"))
    secret = secrets.token_hex(16)
    settings = Settings.from_mapping(
        {
            "CASEKEEPER_STORE": "sqlite",
            "CASEKEEPER_SQLITE_PATH": str(tmp / "store.sqlite"),
            "CASEKEEPER_QUEUE": "local",
            "CASEKEEPER_LOCAL_QUEUE_PATH": str(tmp / "queue.sqlite"),
            "CASE_EVENTS_QUEUE": QUEUE,
            "WEBHOOK_SECRET": secret,
            "SUPPLIER_PORTAL_URL": supplier_url,
            "TRACE_SAMPLING_RATIO": str(variant.ratio if variant.ratio is not None else 1.0),
            "AGENT_FRAMEWORK_SPANS": str(variant.framework_spans).lower(),
        }
    )
    if variant.ratio is None:
        use_framework_spans(False)
    else:
        os.environ["CASEKEEPER_TELEMETRY_FILE"] = os.devnull
        os.environ.pop("OTEL_EXPORTER_OTLP_ENDPOINT", None)
        assert configure(settings) == "console"
    services = bootstrap.build(settings)
    bootstrap.use(services)
    functions = {f.get_function_name(): f.get_user_function() for f in function_app.create_app().get_functions()}
    return App(
        services=services,
        events=functions["events"],
        worker=functions["case_worker"],
        queue=LocalSessionQueue(settings.local_queue_path),
        provider=trace.get_tracer_provider(),
        secret=secret,
    )


def one_round(app: App, cases: int) -> tuple[list[str], float]:
    """``cases`` cases through the webhook, then handled concurrently. Returns their ids and the CPU
    milliseconds per case, export included."""
    import azure.functions as func

    from shared.handlers.ingress import DELIVERY_HEADER, SIGNATURE_HEADER, sign
    from shared.messaging.sqlite_queue import to_service_bus_message

    ids = [f"INV-{uuid.uuid4().hex[:10]}" for _ in range(cases)]
    gc.collect()  # the previous round's garbage is the previous round's cost
    start = time.process_time()
    for case_id in ids:
        body = json.dumps({"type": "invoice.received", "caseId": case_id, "data": _invoice(case_id)}).encode()
        headers = {
            "Content-Type": "application/json",
            SIGNATURE_HEADER: sign(app.secret, body, int(time.time()), f"d-{case_id}"),
            DELIVERY_HEADER: f"d-{case_id}",
        }
        request = func.HttpRequest(method="POST", url="http://localhost/api/events", headers=headers, body=body)
        assert app.events(request).status_code == 202
    received = [app.queue.receive(QUEUE) for _ in ids]
    messages = [m for m in received if m is not None]
    assert len(messages) == cases, "a message did not arrive"

    async def handle_all() -> None:
        await asyncio.gather(*(app.worker(to_service_bus_message(m)) for m in messages))

    asyncio.run(handle_all())
    for m in messages:
        app.queue.complete(m)
    flush = getattr(app.provider, "force_flush", None)
    if flush is not None:
        flush()
    return ids, (time.process_time() - start) * 1000.0 / cases


def run_variant(variant: Variant, supplier_url: str, *, cases: int, rounds: int, warmup: int) -> dict[str, Any]:
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    app = open_app(variant, supplier_url)
    case_ids: list[str] = []
    per_case: list[float] = []
    for number in range(warmup + rounds):
        ids, cpu_ms = one_round(app, cases)
        case_ids.extend(ids)
        if number >= warmup:
            per_case.append(cpu_ms)

    # Untimed: how many spans a case exports, counted beside the configured exporter.
    counted = InMemorySpanExporter()
    traced = isinstance(app.provider, TracerProvider)
    if traced:
        app.provider.add_span_processor(SimpleSpanProcessor(counted))
    for _ in range(COUNTING_ROUNDS):
        case_ids.extend(one_round(app, cases)[0])
    spans_per_case = len(counted.get_finished_spans()) / (cases * COUNTING_ROUNDS) if traced else None
    done = sum(1 for case_id in case_ids if app.services.cases.require(case_id).status == "credit_requested")
    app.queue.close()
    app.services.close()
    return {"variant": variant.name, "cpu_ms_per_case": per_case, "spans_per_case": spans_per_case, "ok": done}


# --- the parent: the supplier stub, the children, the table -----------------------------------------


def _child(variant: str, supplier_url: str, args: argparse.Namespace) -> dict[str, Any]:
    command = [
        sys.executable,
        "-m",
        "benchmarks.telemetry_cost",
        "--child",
        variant,
        "--supplier",
        supplier_url,
        "--cases",
        str(args.cases),
        "--rounds",
        str(args.rounds),
        "--warmup",
        str(args.warmup),
    ]
    env = {k: v for k, v in os.environ.items() if k not in ("OTEL_EXPORTER_OTLP_ENDPOINT", "WEBSITE_INSTANCE_ID")}
    env.pop("APPLICATIONINSIGHTS_CONNECTION_STRING", None)
    done = subprocess.run(
        command, cwd=Path(__file__).resolve().parents[1], env=env, capture_output=True, text=True, check=False
    )
    if done.returncode != 0:
        raise RuntimeError(f"variant {variant} failed:\n{done.stderr[-3000:]}")
    [line] = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
    return json.loads(line.removeprefix("RESULT "))  # type: ignore[no-any-return]


def _quartiles(values: list[float]) -> tuple[float, float, float]:
    q1, q2, q3 = statistics.quantiles(values, n=4) if len(values) > 1 else (values[0],) * 3
    return q1, q2, q3


def table(results: dict[str, list[dict[str, Any]]], cases: int) -> str:
    rows = []
    medians = {name: _quartiles([x for r in runs for x in r["cpu_ms_per_case"]])[1] for name, runs in results.items()}
    shipped, floor = medians.get("shipped"), medians.get("no-tracing")
    header = (
        f"{'variant':<11} {'AF spans':>8} {'ratio':>6} {'spans/case':>10} "
        f"{'CPU ms/case':>11} {'(p25-p75)':>13} {'vs shipped':>10} {'tracing':>8}"
    )
    rows.append(header)
    rows.append("-" * len(header))
    for name, runs in results.items():
        variant = VARIANTS[name]
        values = [x for r in runs for x in r["cpu_ms_per_case"]]
        q1, q2, q3 = _quartiles(values)
        spans = runs[0]["spans_per_case"]
        vs = f"{(q2 / shipped - 1) * 100:+.0f} %" if shipped else "-"
        tracing = f"{q2 - floor:.1f}" if floor is not None else "-"
        rows.append(
            f"{name:<11} {'on' if variant.framework_spans else 'off':>8} "
            f"{'-' if variant.ratio is None else f'{variant.ratio:g}':>6} "
            f"{'-' if spans is None else f'{spans:.1f}':>10} {q2:>11.1f} {f'({q1:.1f}-{q3:.1f})':>13} "
            f"{vs:>10} {tracing:>8}"
        )
    rounds = sum(len(r["cpu_ms_per_case"]) for r in next(iter(results.values())))
    rows.append("")
    rows.append(
        f"{cases} concurrent cases a round, {rounds} counted rounds per variant; 'tracing': CPU ms a case pays "
        "for tracing, over the no-tracing floor."
    )
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.telemetry_cost", description=__doc__.split("\n")[0])
    parser.add_argument("--cases", type=int, default=8, help="concurrent cases per round (default 8)")
    parser.add_argument("--rounds", type=int, default=10, help="counted rounds per run (default 10)")
    parser.add_argument("--warmup", type=int, default=2, help="rounds not counted, first (default 2)")
    parser.add_argument("--repeat", type=int, default=3, help="runs per variant, interleaved (default 3)")
    parser.add_argument("--variants", default=",".join(VARIANTS), help=f"comma-separated, of {', '.join(VARIANTS)}")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--supplier", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)

    if args.child:
        result = run_variant(
            VARIANTS[args.child], args.supplier, cases=args.cases, rounds=args.rounds, warmup=args.warmup
        )
        print("RESULT " + json.dumps(result))
        return 0

    names = [n.strip() for n in args.variants.split(",") if n.strip()]
    unknown = [n for n in names if n not in VARIANTS]
    if unknown:
        parser.error(f"unknown variant(s): {', '.join(unknown)}")
    from devhost.supplier_stub import SupplierStub

    results: dict[str, list[dict[str, Any]]] = {n: [] for n in names}
    with SupplierStub(port=0) as stub:
        for repeat in range(args.repeat):
            order = names[repeat % len(names) :] + names[: repeat % len(names)]  # rotate who goes first
            for name in order:
                print(f"run {repeat + 1}/{args.repeat}: {name}", file=sys.stderr, flush=True)
                results[name].append(_child(name, stub.url, args))
    print(table(results, args.cases))
    expected = args.cases * (args.warmup + args.rounds + COUNTING_ROUNDS)
    failed = [n for n, runs in results.items() if any(r["ok"] != expected for r in runs)]
    if failed:
        print(f"cases that did not end credit_requested in: {', '.join(failed)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
