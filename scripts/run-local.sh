#!/usr/bin/env bash
# make run: a working Casekeeper on this machine. Starts the supplier stub and the local host on a
# fresh data folder, and prints how to send an event and read the case. Ctrl-C stops both.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=.venv/bin
# The default data folder of casekeeper dev, send and the operator commands: copied commands just work.
DATA=${CASEKEEPER_RUN_DATA:-.casekeeper/dev}
PORT=${PORT:-7071}
SUPPLIER_PORT=${SUPPLIER_PORT:-8765}

rm -rf "$DATA"
mkdir -p "$DATA"
"$BIN/casekeeper" supplier-stub --port "$SUPPLIER_PORT" --log "$DATA/supplier.jsonl" --quiet >"$DATA/supplier.url" &
STUB=$!
trap 'kill $STUB 2>/dev/null || true' EXIT
for _ in $(seq 50); do [ -s "$DATA/supplier.url" ] && break; sleep 0.1; done
if [ ! -s "$DATA/supplier.url" ]; then echo "the supplier stub did not start (is port $SUPPLIER_PORT free?)" >&2; exit 1; fi

cat <<TXT
Casekeeper is starting on http://127.0.0.1:$PORT (data: $DATA, supplier stub: $(cat "$DATA/supplier.url")).

In another terminal, send an invoice that is over-billed by 250.00:

  $BIN/casekeeper send invoice.received INV-1001 invoiceId=INV-1001 supplierId=SUP-1 poNumber=PO-77 \\
      invoiceAmount=1250.00 poAmount=1000.00 currency=EUR --url http://127.0.0.1:$PORT --data $DATA

Read the case (status credit_requested, one effect done):

  curl -s http://127.0.0.1:$PORT/api/cases/INV-1001

What the supplier received:  cat $DATA/supplier.jsonl
Operator view:               $BIN/casekeeper case show INV-1001 --data $DATA
Make the supplier misbehave: curl -X POST -H 'Content-Type: application/json' \\
                               -d '{"fail_before_create": 1}' $(cat "$DATA/supplier.url")/_control/faults

TXT
SUPPLIER_PORTAL_URL="http://127.0.0.1:$SUPPLIER_PORT" "$BIN/casekeeper" dev --port "$PORT" --data "$DATA"
