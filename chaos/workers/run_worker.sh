#!/usr/bin/env bash
# The chaos run's `accord run` worker (chaos/run.py starts it; see docs/reliability.md): loops
# `accord run KEY -- sh -c '…'`, whose command makes the fenced write with psql and
# $ACCORD_FENCE: accord.check_fence and the UPDATE in one transaction (psql -1; a refusal is
# check_fence's SQLSTATE AC001). Configured by the environment: CHAOS_ACCORD (the accord binary), CHAOS_PSQL,
# CHAOS_URL, CHAOS_WRITER_URL, CHAOS_NAMESPACE, CHAOS_NAME, CHAOS_KEYS, CHAOS_TTL_MS.
set -u
IFS=, read -r -a keys <<<"$CHAOS_KEYS"
export ACCORD_URL=$CHAOS_URL ACCORD_NAMESPACE=$CHAOS_NAMESPACE ACCORD_OWNER=$CHAOS_NAME
now() { date +%s.%N; }
# shellcheck disable=SC2016  # expanded by the command's shell, with accord's environment
body='
  printf "{\"ev\": \"granted\", \"key\": \"%s\", \"fence\": %s, \"t\": %s}\n" "$ACCORD_KEY" "$ACCORD_FENCE" "$(date +%s.%N)"
  sleep 0.0$((RANDOM % 9 + 1))
  n=$(PGAPPNAME=chaos-writer PGCONNECT_TIMEOUT=3 "$CHAOS_PSQL" -X -q -At -1 -v ON_ERROR_STOP=1 -v VERBOSITY=sqlstate "$CHAOS_WRITER_URL" -c "SELECT accord.check_fence('"'"'$ACCORD_NAMESPACE'"'"', '"'"'$ACCORD_KEY'"'"', $ACCORD_FENCE)" -c "WITH w AS (UPDATE chaos_resource SET fence = $ACCORD_FENCE, writer = '"'"'$ACCORD_OWNER'"'"' WHERE key = '"'"'$ACCORD_KEY'"'"' AND fence < $ACCORD_FENCE RETURNING 1) SELECT count(*) FROM w" 2>&1)
  case $n in
    *AC001*) a=false ;;
    *) case ${n##*$'"'"'\n'"'"'} in 1) a=true ;; 0) a=false ;; *) a= ;; esac ;;
  esac
  if [ -n "$a" ]; then
    printf "{\"ev\": \"write\", \"key\": \"%s\", \"fence\": %s, \"accepted\": %s, \"t\": %s}\n" "$ACCORD_KEY" "$ACCORD_FENCE" "$a" "$(date +%s.%N)"
  else
    printf "{\"ev\": \"write_error\", \"key\": \"%s\", \"fence\": %s, \"t\": %s}\n" "$ACCORD_KEY" "$ACCORD_FENCE" "$(date +%s.%N)"
  fi
'
export CHAOS_PSQL CHAOS_WRITER_URL
printf '{"ev": "start", "w": "%s", "t": %s}\n' "$CHAOS_NAME" "$(now)"
while :; do
  key=${keys[RANDOM % ${#keys[@]}]}
  "$CHAOS_ACCORD" run --ttl "${CHAOS_TTL_MS}ms" --timeout 3s --kill-after 1s "$key" -- bash -c "$body"
  status=$?
  case $status in
    0) printf '{"ev": "released", "key": "%s", "t": %s}\n' "$key" "$(now)" ;;
    3) ;;
    5) printf '{"ev": "lost", "key": "%s", "how": "exit", "t": %s}\n' "$key" "$(now)" ;;
    *) printf '{"ev": "error", "op": "run", "status": %d, "t": %s}\n' "$status" "$(now)"; sleep 0.2 ;;
  esac
done
