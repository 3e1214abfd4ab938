"""What the simulator knows for certain (what it sent, what the door answered, what the supplier made, what
its people did) and the invariants judged against it. The reference is never the code under test: the
case as the API shows it is compared with this record.

Invariants, each with its name (``--invariants`` picks some):

- ``door``: every webhook, approval and withdrawal POST is answered within :data:`DOOR_ANSWER_SECONDS`
  (world time, store waits included), never with a 5xx other than 503 (a function that raised), and a 503
  carries ``Retry-After``. After every step.
- ``case_size``: no case document is over :data:`MAX_CASE_BYTES`. After every step.
- ``threshold``: money above the approval threshold is asked for only with a person's approval: when the
  notes the supplier made for a case (less what a person withdrew) total more than the threshold, the
  simulator's approver approved a request of that case, or an ``over_requested`` or ``late_outcome`` alert
  names it (a late success no decision could prevent). After every step.
- ``facts``: the facts a case holds equal the facts applied in source order (the newest report of each
  fact wins; a report's place is its ``occurredAt`` when it has one, else when the door first accepted
  its delivery, by the world's clock). At every quiescent point.
- ``money``: what was requested (every note the supplier made for the case, less what a person withdrew)
  never exceeds what the newest facts owe (invoice - PO - credit notes not asked for) by more than the
  tolerance, unless an ``over_requested`` alert names the case. At every quiescent point.
- ``outcomes``: a credit note the supplier made is never left behind an entry closed ``failed`` in silence:
  the entry shows it (``done``), or a ``late_outcome`` alert names the effect. At every quiescent point.
- ``deliveries``: every accepted delivery that would change a fact is applied (a transition names it),
  superseded or set aside, visibly on its case; an accepted invoice has a case. At every quiescent point.
- ``quiescence``: a quiescent world has no ``open`` case without an alert naming it (``awaiting_approval``
  and ``needs_review`` have a person; ``credit_requested`` waits for the supplier's notes). At every
  quiescent point.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from shared.domain import events as ev
from shared.domain.order import instant

MAX_CASE_BYTES = 2 * 1024 * 1024
"""The bound a case document must stay under: Cosmos DB's item limit (2 MB), past which a case can record
nothing more, an effect's outcome included. The product refuses what would take a case past its own
``casekeeper.core.cases.MAX_CASE_BYTES`` (1 MB) and lets only writes that record what already happened
(an outcome, a hand-over to a person, a note) use the rest (docs/design.md#case-bounds), so a case over
2 MB means a bound does not hold."""
DOOR_ANSWER_SECONDS = 5.0
"""The longest a sender may wait for the door's answer (webhook senders give up after 10-30 s)."""
TOLERANCE = Decimal("5.00")
"""``VARIANCE_TOLERANCE``: an excess within it is not an over-ask."""
THRESHOLD = Decimal("1000.00")
"""``APPROVAL_THRESHOLD`` (the simulator runs the defaults)."""

INVARIANTS = ("door", "case_size", "threshold", "facts", "money", "outcomes", "deliveries", "quiescence")
STEP_INVARIANTS = ("door", "case_size", "threshold")


@dataclass(frozen=True)
class Violation:
    invariant: str
    detail: str

    def __str__(self) -> str:
        return f"invariant {self.invariant}: {self.detail}"


@dataclass
class Post:
    """One request the outside world made, and the door's answer."""

    step: int
    case_id: str
    kind: str  # an event type, "approval" or "withdrawal"
    data: dict[str, Any]
    delivery: str
    status: int
    at: float  # world time of the answer
    seconds: float
    retry_after: str | None
    seq: int
    error: str = ""

    @property
    def accepted(self) -> bool:
        return self.status == 202

    @property
    def body_key(self) -> str:
        return json.dumps(self.data, sort_keys=True)


@dataclass
class Record:
    """Everything the simulator knows for certain."""

    posts: list[Post] = field(default_factory=list)
    approved: set[str] = field(default_factory=set)
    """Cases with a request the simulator's approver approved (the door took it, 202)."""
    alerts: dict[str, tuple[str, dict[str, Any]]] = field(default_factory=dict)
    """Every alert ever seen (id -> kind, fields): a person saw it, even once its record expired."""
    shown: dict[str, set[str]] = field(default_factory=dict)
    """Per case, the deliveries it ever showed as applied, held, superseded or set aside (looked at before every
    time jump and at every quiescent point): what a person could see, even once its record expired."""
    shown_aside: dict[str, set[str]] = field(default_factory=dict)
    """Per case, the deliveries it ever showed as set aside."""
    removed: dict[str, int] = field(default_factory=dict)
    """Per case, the last step at which retention removed it (a closed case past
    ``CLOSED_CASE_RETENTION_DAYS``): the store keeps nothing of it, so the reports it had judged are no longer
    the case's, and a fact that reaches it after starts a case anew (docs/design.md#facts-before-their-case)."""
    retired: dict[str, set[tuple[str, str]]] = field(default_factory=dict)
    """Per case, the reports (delivery id, body) of a case retention removed (its predecessor's). A report
    accepted before the removal and still on its way (held, deferred) is not among them: it reaches the case
    anew, even under a delivery id whose other body the removed case judged."""

    retired_notes: set[str] = field(default_factory=set)
    """The supplier's notes made for a case retention has since removed: its predecessor's, not the case's."""
    reached: dict[tuple[str, str, str], float] = field(default_factory=dict)
    """Per (case, delivery id, body), the acceptance stamp of the first copy its case judged (the world's
    ``reached``)."""

    def current(self, post: Post) -> bool:
        """Whether ``post`` belongs to its case as it stands: accepted after retention last removed it, or on
        its way then, not judged by the case removed."""
        if post.step > self.removed.get(post.case_id, 0):
            return True
        return (post.delivery, post.body_key) not in self.retired.get(post.case_id, set())

    def observe(self, case_id: str, view: dict[str, Any] | None) -> None:
        if view is None:
            return
        aside, _ = set_aside_ids(view)
        applied = {str(t["deliveryId"]) for t in view.get("history") or () if t.get("deliveryId")}
        superseded = {str(r.get("deliveryId")) for r in view.get("supersededEvents") or ()}
        # Every delivery the case judged is in its data's ``deliveries`` (with its body's digest), a report
        # that repeated the value the case held included, though a newer one has replaced its order since: a
        # delivery that was dropped is not there.
        judged = set((view.get("data") or {}).get("deliveries") or ())
        self.shown.setdefault(case_id, set()).update(applied | held_deliveries(view) | superseded | aside | judged)
        self.shown_aside.setdefault(case_id, set()).update(aside)

    def facts_posts(self, case_id: str) -> list[Post]:
        return [
            p
            for p in self.posts
            if p.case_id == case_id and p.kind in ev.ORDERED_TYPES and p.accepted and self.current(p)
        ]

    def first_bodies(self) -> dict[str, str]:
        """Each delivery id's body as the door first accepted it, for a case retention has not removed since."""
        first: dict[str, str] = {}
        for p in self.posts:
            if p.accepted and p.kind in ev.ORDERED_TYPES and self.current(p):
                first.setdefault(p.delivery, p.body_key)
        return first


def source_key(post: Post, origin: Post) -> tuple[Decimal, float, int]:
    """A report's place in its source's order: ``(occurredAt or first acceptance, first acceptance, seq)``,
    all of its delivery's first acceptance (``origin``)."""
    occurred = origin.data.get("occurredAt")
    return (instant(occurred) if occurred else Decimal(repr(origin.at)), origin.at, origin.seq)


@dataclass
class Expected:
    po: str | None
    credits: dict[str, str]
    changing: list[Post]
    """Reports that changed a fact when taken in source order (each must be visible on its case): not the
    invoice, which is applied by making its case, nor a report whose content an earlier one already sent."""


def expected_facts(
    record: Record,
    case_id: str,
    set_aside_for_size: set[str],
    aside_bodies: dict[str, set[str]] | None = None,
    opened_with: dict[str, Any] | None = None,
) -> Expected:
    """The facts the accepted reports leave, applied in source order: the PO amount (that of the newest
    report of it, ``invoice.received`` or ``po.updated``: each invoice report carries the invoice's PO) and
    each credit note's newest amount. Left out: a delivery id re-used with
    another body (the door's and the case's to refuse, visibly) and reports the case set aside because they
    would take it past its bound.

    Which body of a re-used delivery id counts: the first the door accepted, unless the case set that one
    aside and applied the other (``aside_bodies``: the bodies it shows set aside, by delivery id). Once the
    door's record of the id has expired, both bodies are accepted, and the one that reaches the case first is
    judged; the case sets the other aside, visibly (docs/design.md#delivery-ids).

    ``opened_with``: the invoice the case was opened with (its ``data.invoice``). An invoice report that differs
    from it in any of its fields, its own PO amount included, describes another invoice: the case sets it
    aside (docs/design.md#fact-order), so it is no report of the PO either."""
    first = record.first_bodies()
    for delivery, bodies in (aside_bodies or {}).items():
        others = {p.body_key for p in record.facts_posts(case_id) if p.delivery == delivery} - bodies
        if first.get(delivery) in bodies and len(others) == 1:
            first[delivery] = next(iter(others))
    origins: dict[tuple[str, str], Post] = {}
    for p in record.facts_posts(case_id):
        origins.setdefault((p.delivery, p.body_key), p)
    for delivery, body in list(origins):
        stamp = record.reached.get((case_id, delivery, body))
        copies = [q for q in record.facts_posts(case_id) if (q.delivery, q.body_key) == (delivery, body)]
        if stamp is not None and len(copies) > 1:
            # Posted again after the door forgot the id, a copy took a stamp of its own: the case judged
            # whichever copy reached it first (docs/design.md#delivery-ids), at that copy's acceptance.
            origins[(delivery, body)] = min(copies, key=lambda q: abs(q.at - stamp))
    reports = [
        p
        for (delivery, body), p in origins.items()
        if first.get(delivery) == body
        and delivery not in set_aside_for_size
        and not (p.kind == ev.INVOICE_RECEIVED and _another_invoice(p.data, opened_with))
    ]
    # Every invoice report is also a report of the invoice's PO amount, in its own place in the order; the
    # oldest is the invoice the case's facts start from.
    ordered = sorted(reports, key=lambda p: source_key(p, p))
    invoice = next((p for p in ordered if p.kind == ev.INVOICE_RECEIVED), None)
    po: str | None = None
    credits: dict[str, str] = {}
    changing: list[Post] = []
    seen_bodies: set[tuple[str, str]] = set()
    for p in ordered:
        if p.kind in (ev.INVOICE_RECEIVED, ev.PO_UPDATED):
            amount = str(Decimal(str(p.data["poAmount"])))
            # The oldest invoice is applied by making its case (checked apart); any other report must show.
            if p is not invoice and amount != po and (p.kind, _without_time(p.data)) not in seen_bodies:
                changing.append(p)
            po = amount
        else:
            note, amount = str(p.data["creditNoteId"]), str(Decimal(str(p.data["amount"])))
            if credits.get(note) != amount and (p.kind, _without_time(p.data)) not in seen_bodies:
                changing.append(p)
            credits[note] = amount
        seen_bodies.add((p.kind, _without_time(p.data)))
    return Expected(po, credits, changing)


INVOICE_FIELDS = ("invoiceId", "supplierId", "poNumber", "invoiceAmount", "poAmount", "currency")


def _another_invoice(data: dict[str, Any], opened_with: dict[str, Any] | None) -> bool:
    if not opened_with:
        return False
    for name in INVOICE_FIELDS:
        mine, theirs = data.get(name), opened_with.get(name)
        if name in ("invoiceAmount", "poAmount"):
            try:
                if Decimal(str(mine)) != Decimal(str(theirs)):
                    return True
            except ArithmeticError:
                return True
        elif str(mine) != str(theirs):
            return True
    return False


def _without_time(data: dict[str, Any]) -> str:
    return json.dumps({k: v for k, v in data.items() if k != "occurredAt"}, sort_keys=True)


# --- after every step -------------------------------------------------------------------------------------


def check_door(posts: Iterable[Post]) -> list[Violation]:
    found = []
    for p in posts:
        problems = []
        if p.seconds > DOOR_ANSWER_SECONDS:
            problems.append(f"after {p.seconds:g}s")
        if p.status >= 500 and p.status != 503:
            problems.append(f"({p.error})")
        if p.status == 503 and not p.retry_after:
            problems.append("without Retry-After")
        if problems:
            found.append(
                Violation("door", f"step {p.step}: {p.kind} for {p.case_id} answered {p.status} {' '.join(problems)}")
            )
    return found


def check_case_size(sizes: dict[str, int]) -> list[Violation]:
    return [
        Violation("case_size", f"case {case_id} is {size} bytes, over the bound of {MAX_CASE_BYTES}")
        for case_id, size in sorted(sizes.items())
        if size > MAX_CASE_BYTES
    ]


def requested(notes: Iterable[Any], view: dict[str, Any] | None) -> Decimal:
    """What the supplier was asked for and made on a case, less the requests a person withdrew."""
    withdrawn = {
        str(w.get("effectKey")) for w in ((view or {}).get("case") or {}).get("facts", {}).get("withdrawn") or ()
    }
    return sum((Decimal(n.amount) for n in notes if n.key not in withdrawn), Decimal("0.00"))


def check_threshold(record: Record, case_id: str, total: Decimal, decided: Iterable[str] = ()) -> list[Violation]:
    """A person approved, or was told: an over-ask (``over_requested``) or a late outcome (``late_outcome``:
    a call that succeeded after its entry was closed, which no decision can prevent) names the case.
    ``decided``: the reasons of the case's requests, for the reader."""
    told = any(
        kind in ("over_requested", "late_outcome") and str(fields.get("caseId")) == case_id
        for kind, fields in record.alerts.values()
    )
    if total > THRESHOLD and case_id not in record.approved and not told:
        return [
            Violation(
                "threshold",
                f"case {case_id}: {total} requested from the supplier, over the approval threshold {THRESHOLD}, "
                f"and no person approved a request (decided: {'; '.join(decided) or '-'})",
            )
        ]
    return []


# --- at a quiescent point ------------------------------------------------------------------------------


def set_aside_ids(view: dict[str, Any]) -> tuple[set[str], set[str]]:
    """The delivery ids the case shows as set aside (all, and those set aside for the case's bound)."""
    everything, for_size = set(), set()
    for r in view.get("rejectedEvents") or ():
        delivery = _delivery_of(r)
        if delivery is None:
            continue
        everything.add(delivery)
        reason = str(r.get("reason") or "").lower()
        if "bytes" in reason or "bound" in reason or "size" in reason:
            for_size.add(delivery)
    return everything, for_size


def held_deliveries(view: dict[str, Any]) -> set[str]:
    """The deliveries the case holds as the newest report of a fact (its ``factOrder``), and those its
    superseded records name as held: a report that changed nothing when it came is visible there."""
    orders = view.get("factOrder") or {}
    held = [orders.get("poAmount"), *((orders.get("credits") or {}).values())]
    held += [r.get("heldOrder") for r in view.get("supersededEvents") or ()]
    return {str(o["deliveryId"]) for o in held if isinstance(o, dict) and o.get("deliveryId")}


def set_aside_bodies(view: dict[str, Any]) -> dict[str, set[str]]:
    """The bodies (``Post.body_key``) of the deliveries the case shows set aside, by delivery id."""
    found: dict[str, set[str]] = {}
    for r in view.get("rejectedEvents") or ():
        delivery = _delivery_of(r)
        try:
            body = json.loads(str(r.get("body") or ""))
        except ValueError:
            continue
        if delivery is not None and isinstance(body, dict) and isinstance(body.get("data"), dict):
            found.setdefault(delivery, set()).add(json.dumps(body["data"], sort_keys=True))
    return found


def _delivery_of(rejected: dict[str, Any]) -> str | None:
    try:
        body = json.loads(str(rejected.get("body") or ""))
    except ValueError:
        body = None
    if isinstance(body, dict) and body.get("deliveryId"):
        return str(body["deliveryId"])
    message_id = str(rejected.get("messageId") or rejected.get("id") or "")
    if message_id.startswith("webhook:"):
        # A copy's id is the first message's, with "@<acceptance>" and ":retry:<n>" (or the like) after it.
        return message_id.removeprefix("webhook:").split(":")[0].split("@")[0]
    return None


def check_quiescent(
    record: Record, case_id: str, view: dict[str, Any] | None, notes: list[Any], wanted: Iterable[str]
) -> list[Violation]:
    wanted = set(wanted)
    found: list[Violation] = []
    invoice_accepted = any(p.kind == ev.INVOICE_RECEIVED for p in record.facts_posts(case_id))
    if view is None:
        if invoice_accepted and "deliveries" in wanted:
            found.append(Violation("deliveries", f"case {case_id}: its invoice was accepted and there is no case"))
        return found
    case = view["case"]
    facts = case.get("facts") or {}
    _, for_size = set_aside_ids(view)
    opened_with = (view.get("data") or {}).get("invoice")
    expected = expected_facts(
        record, case_id, for_size, set_aside_bodies(view), opened_with if isinstance(opened_with, dict) else None
    )
    shown_credits = {str(c["creditNoteId"]): str(Decimal(str(c["amount"]))) for c in facts.get("credits") or ()}
    shown_po = str(Decimal(str(facts["poAmount"]))) if facts.get("poAmount") is not None else None
    if "facts" in wanted and invoice_accepted and (shown_po, shown_credits) != (expected.po, expected.credits):
        found.append(
            Violation(
                "facts",
                f"case {case_id} holds PO {shown_po}, credits {shown_credits}; the reports in source order "
                f"leave PO {expected.po}, credits {expected.credits}",
            )
        )
    if "deliveries" in wanted:
        record.observe(case_id, view)
        shown = record.shown.get(case_id, set())
        for p in expected.changing:
            if p.delivery not in shown:
                found.append(
                    Violation(
                        "deliveries",
                        f"case {case_id}: delivery {p.delivery} ({p.kind} {_without_time(p.data)}, accepted at step "
                        f"{p.step}) was neither applied, superseded nor set aside",
                    )
                )
        # A delivery id accepted again with another body is no copy of the first: the case sets it aside.
        first = record.first_bodies()
        for p in record.facts_posts(case_id):
            if first.get(p.delivery) != p.body_key and p.delivery not in record.shown_aside.get(case_id, set()):
                found.append(
                    Violation(
                        "deliveries",
                        f"case {case_id}: delivery {p.delivery} was accepted at step {p.step} with another body "
                        f"({_without_time(p.data)}) than its first, and the case does not show it set aside",
                    )
                )
    if "money" in wanted and expected.po is not None and facts.get("invoiceAmount") is not None:
        ours = {n.note_id for n in notes}
        external = sum((Decimal(a) for note, a in expected.credits.items() if note not in ours), Decimal("0.00"))
        owed = Decimal(str(facts["invoiceAmount"])) - Decimal(expected.po) - external
        asked = requested(notes, view)
        alerted = any(
            kind == "over_requested" and str(fields.get("caseId")) == case_id for kind, fields in record.alerts.values()
        )
        if asked - max(owed, Decimal("0.00")) > TOLERANCE and not alerted:
            found.append(
                Violation(
                    "money",
                    f"case {case_id}: {asked} requested ({', '.join(n.amount for n in notes)}) where the newest "
                    f"facts owe {owed}, and no over_requested alert names the case (status {case['status']})",
                )
            )
    if "outcomes" in wanted:
        made = {n.key: n for n in notes}
        late = {str(fields.get("effectKey")) for kind, fields in record.alerts.values() if kind == "late_outcome"}
        for effect in view.get("effects") or ():
            key = str(effect.get("key"))
            if effect.get("status") == "failed" and key in made and key not in late:
                found.append(
                    Violation(
                        "outcomes",
                        f"case {case_id}: the supplier made note {made[key].note_id} ({made[key].amount}) for effect "
                        f"{key[:12]}, which stays failed ({effect.get('reason')}) and no late_outcome alert names it",
                    )
                )
    named = any(str(fields.get("caseId")) == case_id for _, fields in record.alerts.values())
    if "quiescence" in wanted and case.get("status") == "open" and not named:
        found.append(Violation("quiescence", f"case {case_id} is open in a quiescent world and no alert names it"))
    return found
