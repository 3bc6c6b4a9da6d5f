#!/usr/bin/env bash
# Every Go fuzzer in the repository, one after another, for FUZZTIME each
# (default 5m; any `go test -fuzztime` value, e.g. 30s or 100000x). `make fuzz`;
# not in CI. FUZZ_ONLY (a regexp) picks fuzzers by name. Fuzzers are found in
# every module of the repository (istio-aux's and the tools modules under
# hack/tools: the differential test against Istio lives in hack/tools/istio),
# as `go test -list '^Fuzz'` lists them in each package that declares one.
# Prints one line per fuzzer with its execs and new corpus entries; a fuzzer
# that finds a failure writes the input under its package's testdata/fuzz
# (commit it: it becomes a seed) and fails the run, after the others ran.
set -o errexit -o nounset -o pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "${root}"

fuzztime="${FUZZTIME:-5m}"
only="${FUZZ_ONLY:-.}"
log="${ISTIO_AUX_CACHE:-${root}/_output}/fuzz.log" # every fuzzer's output, for reading a failure
mkdir -p "$(dirname "${log}")"
: >"${log}"

# Packages that declare a fuzzer: a cheap look before asking go, which
# compiles each package's tests to list them.
mapfile -t dirs < <(grep -rlE --include='*_test.go' '^func Fuzz[A-Z0-9_]' . | xargs -r -n1 dirname | sort -u)
if ((${#dirs[@]} == 0)); then
  echo "no fuzzers found" >&2
  exit 1
fi

failed=()
ran=0
printf '%-60s %-22s %12s %8s  %s\n' package fuzzer execs "new" result
for dir in "${dirs[@]}"; do
  mapfile -t names < <(cd "${dir}" && go test -list '^Fuzz' . | grep '^Fuzz' | grep -E -- "${only}" || true)
  for name in "${names[@]}"; do
    out="$(mktemp)"
    result=ok
    if ! (cd "${dir}" && go test -run '^$' -fuzz "^${name}\$" -fuzztime "${fuzztime}" .) >"${out}" 2>&1; then
      result=FAILED
      failed+=("${dir} ${name}")
    fi
    { echo "=== ${dir} ${name}"; cat "${out}"; } >>"${log}"
    execs="$({ grep -o 'execs: [0-9]*' "${out}" || true; } | tail -1 | awk '{print $2}')"
    new="$({ grep -o 'new interesting: [0-9]*' "${out}" || true; } | tail -1 | awk '{print $3}')"
    printf '%-60s %-22s %12s %8s  %s\n' "${dir#./}" "${name}" "${execs:-0}" "${new:-0}" "${result}"
    if [[ "${result}" != ok ]]; then
      grep -E -A8 -- '--- FAIL|panic:' "${out}" | head -40 >&2 || true
    fi
    rm -f "${out}"
    ran=$((ran + 1))
  done
done

echo "${ran} fuzzers, ${fuzztime} each; output in ${log}" >&2
if ((${#failed[@]} > 0)); then
  printf 'failed: %s\n' "${failed[@]}" >&2
  exit 1
fi
