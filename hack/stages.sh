# Sourced by the suites' scripts: `timed NAME CMD...` runs CMD and records
# its wall time (and failure); the table prints when the script exits,
# titled with STAGES_TITLE.
stages=()
timed() {
  local name="$1"; shift
  local start=${SECONDS} rc=0
  "$@" || rc=$?
  stages+=("$(printf '%-32s %4ds%s' "${name}" $((SECONDS - start)) "$( ((rc)) && echo '  FAILED')")")
  return "${rc}"
}
report_stages() {
  echo "--- ${STAGES_TITLE:-stage times} ---"
  printf '%s\n' "${stages[@]}"
}
trap report_stages EXIT
