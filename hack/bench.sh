#!/usr/bin/env bash
# Benchmarks (make bench): prints ONE table of measured figures.
#   webhook   in-process Admit latency; pod CREATE latency with/without the webhook
#   bridge    updates/s through the pipeline into JetStream; RSS vs a full-pod informer
#   outside   bridge CPU and RSS with 10,000 churning pods outside the opt-in, vs none
#   namespaces  1,000 opted-in namespaces of 10 pods vs one of 10,000: the bridge's
#             RSS and start, the API server's CPU
#   reaction  app exit -> quit exec, vs a floor and the reference's serial approach
#   scale     N one-pod Jobs at once on the local control plane
#   completion  app exit -> pod Succeeded / Job Complete on the real node:
#             istio-aux vs Istio's native sidecar vs a floor vs serial; and
#             istio-aux's CPU per pod vs the node's
# BENCH_QUICK=1 runs a small version (a few minutes); BENCH_ONLY=admit,
# pipeline,admission,memory,outside,namespaces,reaction,scale,completion runs
# only those parts. The table is also
# written to ${BENCH_OUT:-_output/bench.txt}. Method: docs/bench.md.
set -o errexit -o nounset -o pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "${root}"
cache="${ISTIO_AUX_CACHE:-${root}/_output}"
out="${BENCH_OUT:-${cache}/bench.txt}"
quick="${BENCH_QUICK:-}"
rows="$(mktemp)"
logs="${cache}/bench-test.log" # go test's own output, kept for reading a red row
mkdir -p "${cache}"
trap 'rm -f "${rows}"' EXIT

# Machine and load at start: figures mean little without them.
cpu="$(awk -F': ' '/^model name/ {print $2; exit}' /proc/cpuinfo)"
load_start="$(cut -d' ' -f1-3 /proc/loadavg)"
started=${SECONDS}

echo "building (control plane, kubelet, kwok, istiod, istio-aux binaries, stubs) ..." >&2
hack/build-k8s.sh >/dev/null
hack/build-kwok.sh >/dev/null
hack/build-istio.sh >/dev/null
# The real node's packages, for the completion part (as root; it says so).
if ((EUID == 0)) && { [[ -z "${BENCH_ONLY:-}" ]] || [[ ",${BENCH_ONLY// /}," == *",completion,"* ]]; }; then
  hack/node-deps.sh
fi
hack/build-ours.sh ./test/bench/cmd/fullinformer ./functions/proxyquit/cmd/proxyquit github.com/nats-io/nats-server/v2

# want PART: BENCH_ONLY (comma-separated) selects PART, or is empty.
want() { [[ -z "${BENCH_ONLY:-}" || ",${BENCH_ONLY// /}," == *",$1,"* ]]; }
row() { printf '%s\t%s\t%s\t%s\t%s\n' "$@" >>"${rows}"; }
# metric NAME reads the value before a unit in `go test -bench` output.
metric() { awk -v unit="$2" '{for (i = 2; i <= NF; i++) if ($i == unit) {print $(i-1); exit}}' <<<"$1"; }
le() { awk -v a="$1" -v b="$2" 'BEGIN {exit !(a + 0 <= b + 0)}'; }
ok() { if "$@"; then echo yes; else echo NO; fi; }
# table aligns tab-separated rows (column(1) is not everywhere).
table() {
  if command -v column >/dev/null; then column -t -s $'\t'; else
    awk -F'\t' '{for (i = 1; i <= NF; i++) {c[NR, i] = $i; if (length($i) > w[i]) w[i] = length($i)}; n = NR; m = (NF > m ? NF : m)}
      END {for (r = 1; r <= n; r++) {for (i = 1; i <= m; i++) printf "%-*s  ", w[i], c[r, i]; print ""}}'
  fi
}

if want admit; then
  echo "webhook: in-process Admit ..." >&2
  admit_n=200000
  [[ -n "${quick}" ]] && admit_n=20000
  admit="$(go test -run XXX -bench 'BenchmarkAdmitLatency$' -benchtime "${admit_n}x" -count 1 ./webhook/ | grep '^BenchmarkAdmitLatency')"
  p50="$(metric "${admit}" p50-µs)"; p99="$(metric "${admit}" p99-µs)"
  row webhook "in-process admission (review decoded, Admit, answer encoded) p50 / p99 (n=${admit_n})" "${p50} / ${p99} µs" "p99 ≤ 200 µs" "$(ok le "${p99}" 200)"
fi

if want pipeline; then
  echo "bridge: pipeline into JetStream ..." >&2
  benchtime=5s
  [[ -n "${quick}" ]] && benchtime=1s
  # At the GOGC the bridge binary runs with (bridge/cmd/bridge).
  pipe="$(GOGC=50 go test -run XXX -bench 'BenchmarkPipeline$' -benchtime "${benchtime}" -count 1 ./bridge/watch/ | grep '^BenchmarkPipeline')"
  ups="$(metric "${pipe}" updates/s)"; cpu_us="$(metric "${pipe}" cpu-µs/update)"
  # The target is the CPU per update (bridge and embedded nats-server
  # together), which the host's load does not move; updates/s does, and is
  # reported. Where the CPU goes: docs/bench.md.
  row bridge "pipeline CPU per update, acked by JetStream (GOGC=50, as the bridge runs)" "$(printf '%s CPU-µs/update (%.0f updates/s)' "${cpu_us}" "${ups}")" "≤ 60 CPU-µs/update" "$(ok le "${cpu_us}" 60)"
fi

rc=0
if want admission || want memory || want outside || want namespaces || want reaction || want scale || want completion; then
echo "control plane: admission, memory, outside, namespaces, reaction, scale (logs: ${TMPDIR:-/tmp}/istio-aux-bench.log) ..." >&2
timeout=60m
BENCH_RESULTS="${rows}" go test -tags e2e -count=1 -timeout "${timeout}" -run 'TestBench$|TestBenchCompletion' -v ./test/bench/ >"${logs}" 2>&1 || rc=$?
if ((rc)); then
  echo "--- control-plane benchmarks FAILED (rc ${rc}); their log: ---" >&2
  grep -E -- '--- FAIL|_test.go:[0-9]+:' "${logs}" | grep -v '^\s*results_test' | tail -40 >&2 || true
fi
fi

{
  echo "istio-aux benchmarks $(date -u +%FT%TZ)$( [[ -n "${quick}" ]] && echo ' (BENCH_QUICK: small sizes)')"
  echo "machine: $(nproc) CPUs, ${cpu}, $(awk '/MemTotal/ {printf "%.0f GiB", $2/1048576}' /proc/meminfo); load average at start ${load_start}, at end $(cut -d' ' -f1-3 /proc/loadavg); ${SECONDS}s"
  echo
  { printf 'AREA\tMEASURE\tVALUE\tTARGET\tMET\n'; cat "${rows}"; } | table
} | tee "${out}"
exit "${rc}"
