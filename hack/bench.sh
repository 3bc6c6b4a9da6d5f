#!/usr/bin/env bash
# Benchmarks (make bench): prints ONE table of measured figures.
#   webhook   in-process Admit latency; pod CREATE latency with/without the webhook
#   bridge    updates/s through the pipeline into JetStream; RSS vs a full-pod informer
#   fsync     an acknowledged publish with NATS fsyncing every write vs its default
#   outside   bridge CPU and RSS with 10,000 churning pods outside the opt-in, vs none
#   namespaces  N opted-in namespaces of 10 pods (1,000 and 10,000) vs one of N*10:
#             the API server's CPU and RSS with no watch, with one watch per
#             namespace (the previous design), with the bridge; its start, RSS
#   reaction  app exit -> quit exec, vs a floor and the reference's serial approach
#   scale     N one-pod Jobs at once on the local control plane
#   knative   the function as a Knative Service on the real node: cold vs
#             warm quit, a burst vs the all-in-one, a pod deleted under load
#   completion  app exit -> pod Succeeded / Job Complete on the real node:
#             istio-aux vs Istio's native sidecar vs a floor vs serial; and
#             istio-aux's CPU per pod vs the node's
# BENCH_QUICK=1 runs a small version (a few minutes); BENCH_ONLY=admit,fsync,
# pipeline,admission,memory,outside,namespaces,reaction,scale,completion,knative
# runs only those parts. The table is also
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

# want PART: BENCH_ONLY (comma-separated) selects PART, or is empty.
want() { [[ -z "${BENCH_ONLY:-}" || ",${BENCH_ONLY// /}," == *",$1,"* ]]; }

echo "building (control plane, kubelet, kwok, istiod, istio-aux binaries, stubs) ..." >&2
hack/build-k8s.sh >/dev/null
hack/build-kwok.sh >/dev/null
hack/build-istio.sh >/dev/null
# The real node's packages, for the completion and knative parts (as root; it says so).
if ((EUID == 0)) && { want completion || want knative; }; then
  hack/node-deps.sh
fi
hack/build-ours.sh ./test/bench/cmd/fullinformer ./functions/proxyquit/cmd/proxyquit github.com/nats-io/nats-server/v2

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

if want fsync; then
  echo "NATS: an acknowledged publish with sync_interval always vs the 2-minute default ..." >&2
  n=5000
  [[ -n "${quick}" ]] && n=1000
  fsync="$(go test -run XXX -bench 'BenchmarkPublishFsync' -benchtime "${n}x" -count 1 ./bridge/transport/ | grep '^BenchmarkPublishFsync')"
  fs_default="$(awk '/default/ {print $3 / 1000}' <<<"${fsync}")"
  fs_always="$(awk '/always/ {print $3 / 1000}' <<<"${fsync}")"
  fs_ratio="$(awk -v a="${fs_always}" -v d="${fs_default}" 'BEGIN {printf "%.1f", a / d}')"
  # Priced per event, one a pod that finished: a few a second at most.
  row nats "acked publish, fsync every write (config/nats) / every 2 min (default), one at a time (n=${n})" \
    "${fs_always} / ${fs_default} µs (${fs_ratio}x)" "≤ 5 ms an event" "$(ok le "${fs_always}" 5000)"
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
# The namespaces part alone takes about 50 minutes in the full run (two
# sets of 100,000 pods created at N=10,000, docs/bench.md).
timeout=120m
[[ -n "${quick}" ]] && timeout=60m
# E2E_REBUILD: istio-aux and the floors are built again, never an old build measured.
E2E_REBUILD=1 BENCH_RESULTS="${rows}" go test -tags e2e -count=1 -timeout "${timeout}" -run 'TestBench$|TestBenchCompletion' -v ./test/bench/ >"${logs}" 2>&1 || rc=$?
if ((rc)); then
  echo "--- control-plane benchmarks FAILED (rc ${rc}); their log: ---" >&2
  grep -E -- '--- FAIL|_test.go:[0-9]+:' "${logs}" | grep -v '^\s*results_test' | tail -40 >&2 || true
fi
fi

if want knative; then
  if ((EUID != 0)); then
    row knative "Knative scaling on the real node" "not run: needs root" "" "NO"
    rc=1
  else
    echo "knative: cold starts, a pod deleted under load, a burst (real node, config/ with Knative Serving) ..." >&2
    hack/build-coredns.sh >/dev/null
    hack/build-tools.sh >/dev/null
    hack/build-knative.sh >/dev/null
    klog="${cache}/bench-knative.log"
    NODE_BENCH_KNATIVE=1 go test -tags e2e -count=1 -timeout 60m -run 'TestNodeBenchKnative$' -v ./test/node/ >"${klog}" 2>&1 || {
      rc=$?
      echo "--- knative benchmark FAILED; its log: ${klog} ---" >&2
      grep -E -- '--- FAIL|_test.go:[0-9]+:' "${klog}" | tail -20 >&2 || true
    }
    # kv KEY NAME: NAME=value from the "BENCH knative KEY ..." line.
    kv() { awk -v key="$1" -v name="$2" '$1 == "BENCH" && $2 == "knative" && $3 == key {
      for (i = 4; i <= NF; i++) { split($i, f, "="); if (f[1] == name) { print f[2]; exit } } }' "${klog}"; }
    num() { tr -dc '0-9.' <<<"$1"; }
    if [[ -n "$(kv cold p99)" ]]; then
      added="$(awk -v c="$(num "$(kv cold p99)")" -v w="$(num "$(kv warm p99)")" 'BEGIN {printf "%.0f", c - w}')"
      row knative "scale from zero: app exit -> quit, cold / warm p50 and p99 (n=$(kv cold n))" \
        "cold $(kv cold p50) / $(kv cold p99), warm $(kv warm p50) / $(kv warm p99): +${added}ms at p99" "cold adds <= 1500 ms at p99" "$(ok le "${added}" 1500)"
    fi
    if [[ -n "$(kv burst-knative p99)" ]]; then
      ratio="$(awk -v k="$(num "$(kv burst-knative p99)")" -v a="$(num "$(kv burst-allinone p99)")" 'BEGIN {printf "%.2f", k / a}')"
      row knative "burst of $(kv burst-pods jobs) Jobs ending within $(kv burst-pods spread): p99 app exit -> quit, Knative from zero / warm all-in-one" \
        "$(kv burst-knative p99) / $(kv burst-allinone p99) = ${ratio}x" "<= 2x" "$(ok le "${ratio}" 2)"
      row knative "burst: replicas the KPA asked / pods started / most ready at once; each ready after the first exit; last quit -> no ready pod" \
        "$(kv burst-pods replicas) / $(kv burst-pods pods) / $(kv burst-pods max-ready); $(grep '^BENCH knative burst-pods' "${klog}" | sed 's/.*ready-after-first-exit=//'); $(awk '$3 == "burst-to-zero" {print $4}' "${klog}")" \
        ">= 2 replicas, back to zero" "$(ok test "$(kv burst-pods replicas)" -ge 2 2>/dev/null)"
    fi
    if [[ -n "$(kv pod-gone lost)" ]]; then
      row knative "function pod deleted while its quits run ($(kv pod-gone jobs) Jobs)" "lost $(kv pod-gone lost), twice $(kv pod-gone twice)" "0 / 0" \
        "$(ok test "$(kv pod-gone lost)$(kv pod-gone twice)" = 00)"
    fi
  fi
fi

{
  echo "istio-aux benchmarks $(date -u +%FT%TZ)$( [[ -n "${quick}" ]] && echo ' (BENCH_QUICK: small sizes)')"
  echo "machine: $(nproc) CPUs, ${cpu}, $(awk '/MemTotal/ {printf "%.0f GiB", $2/1048576}' /proc/meminfo); load average at start ${load_start}, at end $(cut -d' ' -f1-3 /proc/loadavg); ${SECONDS}s"
  echo
  { printf 'AREA\tMEASURE\tVALUE\tTARGET\tMET\n'; cat "${rows}"; } | table
} | tee "${out}"
exit "${rc}"
