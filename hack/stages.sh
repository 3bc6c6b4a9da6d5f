# Sourced by the suites' scripts: `timed NAME CMD...` runs CMD and records
# its wall time (and failure); the table prints when the script exits,
# titled with STAGES_TITLE. A failed `go test` stage is followed by what
# its failed tests logged last (hack/failures): CI keeps only the tail of a
# failed run, and a suite's own error is thousands of lines above it.
stages=()
failed_tests=()
timed() {
  local name="$1"; shift
  local start=${SECONDS} rc=0 log=""
  if [[ "${1:-} ${2:-}" == "go test" ]]; then
    log="$(mktemp -t istio-aux-stage.XXXXXX)"
    "$@" | tee "${log}" || rc=$?
  else
    "$@" || rc=$?
  fi
  stages+=("$(printf '%-32s %4ds%s' "${name}" $((SECONDS - start)) "$( ((rc)) && echo '  FAILED')")")
  if ((rc)) && [[ -n "${log}" ]]; then
    failed_tests+=("${name}" "${log}")
  elif [[ -n "${log}" ]]; then
    rm -f "${log}"
  fi
  return "${rc}"
}
report_stages() {
  echo "--- ${STAGES_TITLE:-stage times} ---"
  printf '%s\n' "${stages[@]}"
  local i
  for ((i = 0; i < ${#failed_tests[@]}; i += 2)); do
    echo "--- ${failed_tests[i]}: what its failed tests logged last ---"
    (cd "$(dirname "${BASH_SOURCE[0]}")/.." && go run ./hack/failures "${failed_tests[i + 1]}") || true
    rm -f "${failed_tests[i + 1]}"
  done
}
trap report_stages EXIT
