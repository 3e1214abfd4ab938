#!/usr/bin/env bash
# make run: a working Casekeeper on this machine. Starts the supplier stub and the local host on a
# fresh data folder, signed in as a local approver and operator (casekeeper dev --as), sends one
# over-threshold invoice so that an approval is waiting, and prints where to look. Ctrl-C stops both.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=.venv/bin
# The default data folder of casekeeper dev, send and the operator commands: copied commands just work.
DATA=${CASEKEEPER_RUN_DATA:-.casekeeper/dev}
PORT=${PORT:-7071}
SUPPLIER_PORT=${SUPPLIER_PORT:-8765}
# Who the pages see: a stand-in for App Service Authentication, shown on every page as "local identity".
LOCAL_USER=${CASEKEEPER_LOCAL_USER:-you@localhost}

rm -rf "$DATA"
mkdir -p "$DATA"
"$BIN/casekeeper" supplier-stub --port "$SUPPLIER_PORT" --log "$DATA/supplier.jsonl" --quiet >"$DATA/supplier.url" &
STUB=$!
SEED=
trap 'kill $STUB $SEED 2>/dev/null || true' EXIT
for _ in $(seq 50); do [ -s "$DATA/supplier.url" ] && break; sleep 0.1; done
if [ ! -s "$DATA/supplier.url" ]; then echo "the supplier stub did not start (is port $SUPPLIER_PORT free?)" >&2; exit 1; fi

# Once the host answers, one invoice over-billed by 1400.00, above the approval threshold (1000.00): its
# credit-note request waits on the approvals page.
(
  for _ in $(seq 100); do
    curl -sf "http://127.0.0.1:$PORT/api/health" >/dev/null 2>&1 && break
    sleep 0.2
  done
  "$BIN/casekeeper" send invoice.received INV-2002 invoiceId=INV-2002 supplierId=SUP-9 poNumber=PO-88 \
    invoiceAmount=3400.00 poAmount=2000.00 currency=EUR --url "http://127.0.0.1:$PORT" --data "$DATA" >/dev/null \
    && echo "sent INV-2002 (over-billed by 1400.00 EUR): it waits for your approval at http://127.0.0.1:$PORT/api/approvals"
) &
SEED=$!

cat <<TXT
Casekeeper is starting on http://127.0.0.1:$PORT (data: $DATA, supplier stub: $(cat "$DATA/supplier.url")).

Open the approvals page, signed in locally as $LOCAL_USER (approver and operator):

  http://127.0.0.1:$PORT/api/approvals        (operations: http://127.0.0.1:$PORT/api/ops)

INV-2002 is waiting there: approve it and watch the case move to credit_requested
(the supplier stub records one POST /credit-notes in $DATA/supplier.jsonl).

In another terminal, send an invoice that is over-billed by 250.00 (below the threshold: no approval):

  $BIN/casekeeper send invoice.received INV-1001 invoiceId=INV-1001 supplierId=SUP-1 poNumber=PO-77 \\
      invoiceAmount=1250.00 poAmount=1000.00 currency=EUR --url http://127.0.0.1:$PORT --data $DATA

Read the case (status credit_requested, one effect done):

  curl -s http://127.0.0.1:$PORT/api/cases/INV-1001

What the supplier received:  cat $DATA/supplier.jsonl
Operator view:               $BIN/casekeeper case show INV-1001 --data $DATA
Make the supplier misbehave: curl -X POST -H 'Content-Type: application/json' \\
                               -d '{"fail_before_create": 1}' $(cat "$DATA/supplier.url")/_control/faults

TXT
# CASEKEEPER_MODEL=stub make run: a local stand-in model proposes, through the real Azure OpenAI client.
SUPPLIER_PORTAL_URL="http://127.0.0.1:$SUPPLIER_PORT" "$BIN/casekeeper" dev --port "$PORT" --data "$DATA" \
  --as "$LOCAL_USER" --role approver --role operator ${CASEKEEPER_MODEL:+--model "$CASEKEEPER_MODEL"}
