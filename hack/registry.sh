# Sourced: start_registry DIR starts `crane registry serve` (in memory) on a
# free port of 127.0.0.1, logging to DIR/registry.log, and sets reg
# (127.0.0.1:PORT) and registry_pid; stop_registry stops it. crane is
# ${bin}/crane (hack/build-tools.sh).
registry_pid=""
reg=""
start_registry() {
  local dir="$1" port=""
  "${bin}/crane" registry serve --address 127.0.0.1:0 >"${dir}/registry.log" 2>&1 &
  registry_pid=$!
  for _ in $(seq 100); do
    port="$(sed -n 's/.*serving on port \([0-9]*\).*/\1/p' "${dir}/registry.log")"
    [[ -n "${port}" ]] && break
    kill -0 "${registry_pid}" 2>/dev/null || { cat "${dir}/registry.log" >&2; return 1; }
    sleep 0.1
  done
  [[ -n "${port}" ]] || { echo "registry did not start" >&2; cat "${dir}/registry.log" >&2; return 1; }
  reg="127.0.0.1:${port}"
}
stop_registry() {
  if [[ -n "${registry_pid}" ]]; then
    kill "${registry_pid}" 2>/dev/null || true
    wait "${registry_pid}" 2>/dev/null || true
    registry_pid=""
  fi
}
