#!/usr/bin/env bash
# make run: a working Casekeeper on this machine. Starts the supplier stub and the local host on a data
# folder that is kept across restarts, signed in as a local approver and operator (casekeeper dev --as),
# sends one over-threshold invoice the first time so that an approval is waiting, and prints where to
# look. Ctrl-C stops both.
#
# Settings (environment):
#   PORT                    the local host's port (default 7071)
#   SUPPLIER_PORT           the supplier stub's port (default 8765)
#   CASEKEEPER_RUN_DATA     the data folder (default .casekeeper/dev, where the other commands look)
#   CASEKEEPER_LOCAL_USER   who the pages see as signed in (default you@localhost)
#   CASEKEEPER_FRESH=1      start from an empty data folder (or: make run FRESH=1, run-local.sh --fresh)
#
# Nothing is touched before the checks: both ports free, no other make run on the data folder. A fresh
# start deletes Casekeeper's own files in the data folder by name, never the folder or anything else.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=.venv/bin
# The default data folder of casekeeper dev, send and the operator commands: copied commands just work.
DATA=${CASEKEEPER_RUN_DATA:-.casekeeper/dev}
PORT=${PORT:-7071}
SUPPLIER_PORT=${SUPPLIER_PORT:-8765}
# Who the pages see: a stand-in for App Service Authentication, shown on every page as "local identity".
LOCAL_USER=${CASEKEEPER_LOCAL_USER:-you@localhost}
FRESH=${CASEKEEPER_FRESH:-}
MARKER=.casekeeper-run-data
SEED_CASE=INV-2002

for arg in "$@"; do
  case "$arg" in
    --fresh) FRESH=1 ;;
    -h | --help) sed -n '2,16p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "run-local.sh: unknown argument $arg (only --fresh)" >&2; exit 2 ;;
  esac
done

fail() { echo "make run: $*" >&2; exit 1; }

# 1. The ports: anything answering a connection there means the host or the stub could not bind.
port_in_use() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
for pair in "PORT=$PORT" "SUPPLIER_PORT=$SUPPLIER_PORT"; do
  port=${pair#*=}
  [[ "$port" =~ ^[0-9]+$ ]] || fail "${pair%%=*} must be a port number, not '$port'"
  if port_in_use "$port"; then
    fail "port $port (${pair%%=*}) is already in use: is another make run still running? Stop it (Ctrl-C in its" \
      "terminal), or choose another port: ${pair%%=*}=$((port + 1)) make run"
  fi
done
[ "$PORT" != "$SUPPLIER_PORT" ] || fail "PORT and SUPPLIER_PORT are both $PORT"

# 2. The data folder: refuse one that is another make run's, or a folder this script did not make.
if [ -e "$DATA" ] && [ ! -d "$DATA" ]; then fail "CASEKEEPER_RUN_DATA=$DATA is a file, not a folder"; fi
if [ -d "$DATA" ] && [ -n "$(ls -A "$DATA")" ] && [ ! -e "$DATA/$MARKER" ] && [ ! -e "$DATA/casekeeper.sqlite" ]; then
  fail "$DATA is not empty and is not a Casekeeper data folder: choose another CASEKEEPER_RUN_DATA"
fi
mkdir -p "$DATA"
exec 9>>"$DATA/$MARKER"
# Just after Ctrl-C the last run's processes may still be stopping: give them a few seconds.
flock -n 9 || { echo "make run: waiting for the last make run on $DATA to stop..." >&2; flock -w 15 9; } || fail "another make run is using $DATA (its lock $DATA/$MARKER is held): stop it first," \
  "or give this one its own folder: CASEKEEPER_RUN_DATA=.casekeeper/other make run"

# 3. A fresh start, only when asked: it deletes the files Casekeeper keeps there, by name, and nothing else
# (no rm -rf of a path that came from the environment).
if [ -n "$FRESH" ]; then
  echo "make run: fresh start: deleting the stores, the secret and the logs in $DATA"
  for name in casekeeper.sqlite queue.sqlite telemetry.jsonl webhook-secret supplier.jsonl supplier.url; do
    rm -f "$DATA/$name" "$DATA/$name-wal" "$DATA/$name-shm" "$DATA/$name-journal"
  done
  left=$(ls -A "$DATA" | grep -vx "$MARKER" || true)
  [ -z "$left" ] || echo "make run: left alone in $DATA (not Casekeeper's): $(echo $left)" >&2
fi
echo "made by scripts/run-local.sh (make run); delete the folder to start afresh" >"$DATA/$MARKER"

"$BIN/casekeeper" supplier-stub --port "$SUPPLIER_PORT" --log "$DATA/supplier.jsonl" --quiet >"$DATA/supplier.url" &
STUB=$!
SEED=
trap 'kill $STUB $SEED 2>/dev/null || true; wait $STUB 2>/dev/null || true' EXIT
for _ in $(seq 50); do [ -s "$DATA/supplier.url" ] && break; sleep 0.1; done
if [ ! -s "$DATA/supplier.url" ]; then fail "the supplier stub did not start on port $SUPPLIER_PORT"; fi

# Once the host answers, and only if the case is not there yet (a restart keeps it): one invoice
# over-billed by 1400.00, above the approval threshold (1000.00): its credit-note request waits on the
# approvals page.
(
  for _ in $(seq 150); do
    curl -sf "http://127.0.0.1:$PORT/api/health" >/dev/null 2>&1 && break
    sleep 0.2
  done
  code=$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$PORT/api/cases/$SEED_CASE" || true)
  if [ "$code" = 200 ]; then
    echo "$SEED_CASE is already there (data kept from the last run): http://127.0.0.1:$PORT/api/approvals"
  else
    "$BIN/casekeeper" send invoice.received "$SEED_CASE" invoiceId="$SEED_CASE" supplierId=SUP-9 poNumber=PO-88 \
      invoiceAmount=3400.00 poAmount=2000.00 currency=EUR --url "http://127.0.0.1:$PORT" --data "$DATA" >/dev/null \
      && echo "sent $SEED_CASE (over-billed by 1400.00 EUR): it waits for your approval at http://127.0.0.1:$PORT/api/approvals"
  fi
) &
SEED=$!

cat <<TXT
Casekeeper is starting on http://127.0.0.1:$PORT (data: $DATA, kept across restarts; supplier stub: $(cat "$DATA/supplier.url")).

Open the approvals page, signed in locally as $LOCAL_USER (approver and operator):

  http://127.0.0.1:$PORT/api/approvals        (operations: http://127.0.0.1:$PORT/api/ops)

$SEED_CASE is waiting there: approve it and watch the case move to credit_requested
(the supplier stub records one POST /credit-notes in $DATA/supplier.jsonl).

In another terminal, send an invoice that is over-billed by 250.00 (below the threshold: no approval):

  $BIN/casekeeper send invoice.received INV-1001 invoiceId=INV-1001 supplierId=SUP-1 poNumber=PO-77 \\
      invoiceAmount=1250.00 poAmount=1000.00 currency=EUR --url http://127.0.0.1:$PORT --data $DATA

Read the case (status credit_requested, one effect done):

  http://127.0.0.1:$PORT/api/cases/INV-1001/page       (its page: effects, timeline, what to do next)
  curl -s http://127.0.0.1:$PORT/api/cases/INV-1001 | python3 -m json.tool | head -20

What the supplier received:  cat $DATA/supplier.jsonl
Operator view:               $BIN/casekeeper case show INV-1001 --data $DATA
Make the supplier misbehave: curl -X POST -H 'Content-Type: application/json' \\
                               -d '{"fail_before_create": 1}' $(cat "$DATA/supplier.url")/_control/faults
Start again from nothing:    make run FRESH=1

TXT
# CASEKEEPER_MODEL=stub make run: a local stand-in model proposes, through the real Azure OpenAI client.
# The host runs in the background so that this script can wait for it to stop on Ctrl-C or kill: when the
# script returns, the ports are free and the data folder's lock is released, and a new make run can start.
SUPPLIER_PORTAL_URL="http://127.0.0.1:$SUPPLIER_PORT" "$BIN/casekeeper" dev --port "$PORT" --data "$DATA" \
  --as "$LOCAL_USER" --role approver --role operator ${CASEKEEPER_MODEL:+--model "$CASEKEEPER_MODEL"} &
HOST=$!
trap 'echo "make run: stopping..." >&2; kill -TERM $HOST $STUB 2>/dev/null || true' INT TERM
status=0
while kill -0 "$HOST" 2>/dev/null; do
  wait "$HOST" && status=0 || status=$?
done
exit "$status"
