#!/usr/bin/env bash
# make run: a working Casekeeper on this machine. Starts the supplier stub and the local host on a data
# folder that is kept across restarts, signed in as a local approver and operator (casekeeper dev --as),
# sends one over-threshold invoice the first time so that an approval is waiting, and, once the host
# answers, prints where to look and what to do next. Ctrl-C stops both.
#
# Settings (environment):
#   PORT                    the local host's port (default 7071)
#   SUPPLIER_PORT           the supplier stub's port (default 8765)
#   CASEKEEPER_RUN_DATA     the data folder (default .casekeeper/dev, where the other commands look)
#   CASEKEEPER_LOCAL_USER   who the pages see as signed in (default you@localhost)
#   CASEKEEPER_FRESH=1      start from an empty data folder (or: make run FRESH=1, run-local.sh --fresh)
#
# Nothing is touched before every check has passed (both ports valid and free, the data folder one this
# script may use and not another make run's, the tools it needs there); every problem found is reported
# at once, each with its fix. A fresh start deletes Casekeeper's own files in the data folder by name,
# never the folder or anything else.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=.venv/bin
# The defaults of casekeeper dev, send and the operator commands: with them, copied commands just work.
DEFAULT_DATA=.casekeeper/dev
DEFAULT_PORT=7071
DEFAULT_SUPPLIER_PORT=8765
DATA=${CASEKEEPER_RUN_DATA:-$DEFAULT_DATA}
PORT=${PORT:-$DEFAULT_PORT}
SUPPLIER_PORT=${SUPPLIER_PORT:-$DEFAULT_SUPPLIER_PORT}
# Who the pages see: a stand-in for App Service Authentication, shown on every page as "local identity".
LOCAL_USER=${CASEKEEPER_LOCAL_USER:-you@localhost}
FRESH=${CASEKEEPER_FRESH:-}
MARKER=.casekeeper-run-data
SEED_CASE=INV-2002

for arg in "$@"; do
  case "$arg" in
    --fresh) FRESH=1 ;;
    -h | --help) sed -n '2,17p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "run-local.sh: unknown argument $arg (only --fresh)" >&2; exit 2 ;;
  esac
done

fail() { echo "make run: $*" >&2; exit 1; }

# 1. The checks. Each problem is collected with its fix; all are reported together, before anything starts.
PROBLEMS=()
problem() { PROBLEMS+=("$*"); }

valid_port() { [[ "$1" =~ ^[0-9]{1,5}$ ]] && ((10#$1 >= 1 && 10#$1 <= 65535)); }
# Anything answering a connection there means the host or the stub could not bind.
port_in_use() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
# A port above $1 that is free now and none of the others given: what a fix suggests.
free_port_near() {
  local p avoid ok
  for p in $(seq $(($1 + 1)) $(($1 + 50))); do
    ok=1
    for avoid in "${@:2}"; do [ "$p" != "$avoid" ] || ok=; done
    if [ -n "$ok" ] && [ "$p" -le 65535 ] && ! port_in_use "$p"; then echo "$p"; return; fi
  done
  echo $(($1 + 1))
}

# The ports: each a number, free, and not the other one. A suggested port is never one suggested already.
SUGGESTED=
for name in PORT SUPPLIER_PORT; do
  value=${!name}
  default=$DEFAULT_PORT
  [ "$name" = PORT ] || default=$DEFAULT_SUPPLIER_PORT
  if ! valid_port "$value"; then
    port_in_use "$default" && default=$(free_port_near "$default" $SUGGESTED)
    SUGGESTED+=" $default"
    problem "$name='$value' is not a port number (1-65535). Fix: $name=$default make run, or leave $name unset"
    continue
  fi
  port=$((10#$value))
  printf -v "$name" %s "$port"
  if [ "$name" = SUPPLIER_PORT ] && [ "$port" = "$PORT" ]; then
    other=$(free_port_near "$port" "$PORT" $SUGGESTED)
    problem "PORT and SUPPLIER_PORT are both $port. Fix: SUPPLIER_PORT=$other make run"
  elif port_in_use "$port"; then
    other=$(free_port_near "$port" "$PORT" "$SUPPLIER_PORT" $SUGGESTED)
    SUGGESTED+=" $other"
    problem "port $port ($name) is already in use: is another make run still running? Fix: stop it (Ctrl-C" \
      "in its terminal), or choose another port: $name=$other make run"
  fi
done

# The data folder: not a file, not a folder this script did not make, not another make run's (it holds a
# lock on the marker file while it runs; the check takes the lock for a moment and lets it go).
lock_held=
if [ -e "$DATA" ] && [ ! -d "$DATA" ]; then
  problem "CASEKEEPER_RUN_DATA=$DATA is a file, not a folder. Fix: CASEKEEPER_RUN_DATA=.casekeeper/other make run"
elif [ -d "$DATA" ] && [ -n "$(ls -A "$DATA")" ] && [ ! -e "$DATA/$MARKER" ] && [ ! -e "$DATA/casekeeper.sqlite" ]; then
  problem "$DATA is not empty and is not a Casekeeper data folder. Fix: choose another folder," \
    "CASEKEEPER_RUN_DATA=.casekeeper/other make run"
elif [ -f "$DATA/$MARKER" ] && command -v flock >/dev/null && ! flock -n "$DATA/$MARKER" true; then
  lock_held=1
fi

# What the script itself runs.
[ -x "$BIN/casekeeper" ] || problem "$BIN/casekeeper is not installed. Fix: make run (it sets up .venv first), or make setup-run"
for tool in curl flock; do
  command -v "$tool" >/dev/null || problem "$tool is not installed. Fix: apt-get install -y $([ "$tool" = flock ] && echo util-linux || echo "$tool")"
done

# Just after Ctrl-C the last run's processes may still be stopping: when the lock is the only problem,
# give them a few seconds before calling it one.
if [ -n "$lock_held" ] && [ ${#PROBLEMS[@]} -eq 0 ]; then
  echo "make run: another make run holds $DATA; if it is stopping (a Ctrl-C just now), waiting up to 15 s for it..." >&2
  flock -w 15 "$DATA/$MARKER" true && lock_held=
fi
if [ -n "$lock_held" ]; then
  problem "another make run is using $DATA (its lock $DATA/$MARKER is held). Fix: stop it first (Ctrl-C in its" \
    "terminal), or give this one its own folder: CASEKEEPER_RUN_DATA=.casekeeper/other make run"
fi

if [ ${#PROBLEMS[@]} -gt 0 ]; then
  count="${#PROBLEMS[@]} problems"
  [ ${#PROBLEMS[@]} -gt 1 ] || count="1 problem"
  {
    echo "make run: cannot start ($count; nothing was started or changed):"
    for p in "${PROBLEMS[@]}"; do echo "  - $p"; done
  } >&2
  exit 1
fi

# 2. The data folder, now held for this run. Taking the lock can still lose a race with a run that started
# since the check.
mkdir -p "$DATA"
exec 9>>"$DATA/$MARKER"
flock -n 9 || fail "another make run is using $DATA (its lock $DATA/$MARKER is held): stop it first," \
  "or give this one its own folder: CASEKEEPER_RUN_DATA=.casekeeper/other make run"

# A fresh start, only when asked: it deletes the files Casekeeper keeps there, by name, and nothing else
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

# 3. The supplier stub. Its stdout carries only its URL; the last run's file is deleted first, so what is
# read is this stub's URL, never the last one's nor a file half written.
rm -f "$DATA/supplier.url"
"$BIN/casekeeper" supplier-stub --port "$SUPPLIER_PORT" --log "$DATA/supplier.jsonl" --quiet >"$DATA/supplier.url" &
STUB=$!
HOST=
trap 'kill $STUB $HOST 2>/dev/null || true; wait $STUB 2>/dev/null || true' EXIT
SUPPLIER_URL=
for _ in $(seq 100); do
  read -r SUPPLIER_URL <"$DATA/supplier.url" 2>/dev/null || SUPPLIER_URL=
  [[ "$SUPPLIER_URL" =~ ^http://[^/]+:$SUPPLIER_PORT$ ]] && break
  SUPPLIER_URL=
  kill -0 "$STUB" 2>/dev/null || break
  sleep 0.1
done
[ -n "$SUPPLIER_URL" ] || fail "the supplier stub did not start on port $SUPPLIER_PORT (its own message is above)"

# 4. The local host, in the background so that this script can wait for it to stop on Ctrl-C or kill: when
# the script returns, the ports are free and the data folder's lock is released, and a new make run can
# start. CASEKEEPER_MODEL=stub make run: a local stand-in model proposes, through the real Azure OpenAI client.
HOST_URL="http://127.0.0.1:$PORT"
echo "make run: supplier stub on $SUPPLIER_URL; starting the local host on $HOST_URL (data: $DATA)..."
SUPPLIER_PORTAL_URL="$SUPPLIER_URL" "$BIN/casekeeper" dev --port "$PORT" --data "$DATA" \
  --as "$LOCAL_USER" --role approver --role operator ${CASEKEEPER_MODEL:+--model "$CASEKEEPER_MODEL"} &
HOST=$!
STOPPING=
trap 'STOPPING=1; echo "make run: stopping..." >&2; kill -TERM $HOST $STUB 2>/dev/null || true' INT TERM

# The seed case's status as the host reports it: a status, "missing" (404), or "unreadable".
seed_status() {
  local answer code
  answer=$(curl -s -w '\n%{http_code}' "$HOST_URL/api/cases/$SEED_CASE" 2>/dev/null) || { echo unreadable; return; }
  code=${answer##*$'\n'}
  case "$code" in
    200) "$BIN/python" -c 'import json, sys; print(json.load(sys.stdin)["case"]["status"])' <<<"${answer%$'\n'*}" \
      2>/dev/null || echo unreadable ;;
    404) echo missing ;;
    *) echo unreadable ;;
  esac
}

# What to do with the seed case, from its status now.
seed_step() {
  local page="$HOST_URL/api/cases/$SEED_CASE/page"
  case "$1" in
    awaiting_approval)
      if [ "$2" = sent ]; then
        echo "Sent $SEED_CASE (over-billed by 1400.00 EUR, above the approval threshold): it waits for your approval there."
      else
        echo "$SEED_CASE (kept from the last run) is still waiting for your approval there."
      fi
      echo "Approve it and watch the case move to credit_requested (the supplier stub records one"
      echo "POST /credit-notes in $DATA/supplier.jsonl)." ;;
    credit_requested)
      echo "$SEED_CASE was approved in an earlier run: its credit note was requested (credit_requested)."
      echo "Its page: $page" ;;
    needs_review)
      echo "$SEED_CASE was sent to a person in an earlier run (needs_review: rejected, or escalated)."
      echo "Its page: $page" ;;
    open)
      echo "$SEED_CASE is being decided (open): it shows up there when it waits for approval. Its page: $page" ;;
    missing | unreadable)
      echo "$SEED_CASE could not be read from the host ($1): see the host's output above. Its page: $page" ;;
    *)
      echo "$SEED_CASE is $1 now (data kept from an earlier run). Its page: $page" ;;
  esac
  [ "$1" = awaiting_approval ] || echo "To have it waiting for approval again: ${RUN_ENV}make run FRESH=1 (deletes every case)."
}

# Options the printed commands need only when this run differs from the commands' defaults; this run's
# settings that differ, as what goes before make run to run it again.
URL_OPT=
[ "$PORT" = "$DEFAULT_PORT" ] || URL_OPT=" --url $HOST_URL"
DATA_OPT=
[ "$DATA" = "$DEFAULT_DATA" ] || DATA_OPT=" --data $DATA"
RUN_ENV=
[ "$PORT" = "$DEFAULT_PORT" ] || RUN_ENV+="PORT=$PORT "
[ "$SUPPLIER_PORT" = "$DEFAULT_SUPPLIER_PORT" ] || RUN_ENV+="SUPPLIER_PORT=$SUPPLIER_PORT "
[ "$DATA" = "$DEFAULT_DATA" ] || RUN_ENV+="CASEKEEPER_RUN_DATA=$(printf %q "$DATA") "
[ "$LOCAL_USER" = you@localhost ] || RUN_ENV+="CASEKEEPER_LOCAL_USER=$(printf %q "$LOCAL_USER") "

# How the README's commands, written for the defaults, read for this run: only when it is not on them.
not_the_defaults() {
  [ -n "$RUN_ENV" ] || return 0
  printf '\n\n'
  echo "This run is not on the defaults the README's commands are written for. In them, read:"
  [ "$PORT" = "$DEFAULT_PORT" ] || echo "  $HOST_URL for http://127.0.0.1:$DEFAULT_PORT, and give casekeeper send --url $HOST_URL"
  [ "$SUPPLIER_PORT" = "$DEFAULT_SUPPLIER_PORT" ] || echo "  $SUPPLIER_URL for http://127.0.0.1:$DEFAULT_SUPPLIER_PORT"
  [ "$DATA" = "$DEFAULT_DATA" ] || echo "  $DATA for $DEFAULT_DATA, and give every casekeeper command --data $DATA"
  echo "  ${RUN_ENV}make run for make run"
}

banner() {
  cat <<TXT

Casekeeper is running on $HOST_URL (data: $DATA, kept across restarts; supplier stub: $SUPPLIER_URL).

Open the approvals page, signed in locally as $LOCAL_USER (approver and operator):

  $HOST_URL/api/approvals        (operations: $HOST_URL/api/ops)

$(seed_step "$1" "$2")

In another terminal, send an invoice that is over-billed by 250.00 (below the threshold: no approval):

  $BIN/casekeeper send invoice.received INV-1001 invoiceId=INV-1001 supplierId=SUP-1 poNumber=PO-77 \\
      invoiceAmount=1250.00 poAmount=1000.00 currency=EUR$URL_OPT$DATA_OPT

Read the case (status credit_requested, one effect done):

  $HOST_URL/api/cases/INV-1001/page       (its page: effects, timeline, what to do next)
  $BIN/casekeeper case show INV-1001$DATA_OPT
  curl -s $HOST_URL/api/cases/INV-1001 | python3 -m json.tool | head -30

What the supplier received:  cat $DATA/supplier.jsonl
Make the supplier misbehave: curl -X POST -H 'Content-Type: application/json' \\
                               -d '{"fail_after_create": 1}' $SUPPLIER_URL/_control/faults
Start again from nothing:    ${RUN_ENV}make run FRESH=1$(not_the_defaults)

The README's "first ten minutes" go on from here; the commands above are the ones to copy, with this
run's ports and data folder. Ctrl-C stops it.

TXT
}

# 5. Once the host answers: the seed invoice if the case is not there yet (a restart keeps it), over-billed
# by 1400.00, above the approval threshold (1000.00), so that its credit-note request waits on the approvals
# page; then the banner, with what is true of that case now.
answered=
for _ in $(seq 300); do
  [ -z "$STOPPING" ] && kill -0 "$HOST" 2>/dev/null || break
  if curl -sf "$HOST_URL/api/health" >/dev/null 2>&1; then answered=1; break; fi
  sleep 0.2
done
if [ -n "$answered" ]; then
  status=$(seed_status)
  how=kept
  if [ "$status" = missing ]; then
    how=sent
    "$BIN/casekeeper" send invoice.received "$SEED_CASE" invoiceId="$SEED_CASE" supplierId=SUP-9 poNumber=PO-88 \
      invoiceAmount=3400.00 poAmount=2000.00 currency=EUR --url "$HOST_URL" --data "$DATA" >/dev/null || true
    # The worker decides it within a moment: wait for the status the approval page will show.
    for _ in $(seq 100); do
      status=$(seed_status)
      case "$status" in missing | open) sleep 0.2 ;; *) break ;; esac
    done
  fi
  [ -n "$STOPPING" ] || banner "$status" "$how"
elif [ -z "$STOPPING" ] && kill -0 "$HOST" 2>/dev/null; then
  echo "make run: the local host has not answered on $HOST_URL/api/health within a minute: see its output above." >&2
fi

status=0
while kill -0 "$HOST" 2>/dev/null; do
  wait "$HOST" && status=0 || status=$?
done
exit "$status"
