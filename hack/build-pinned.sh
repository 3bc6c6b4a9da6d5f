# Sourced by the build scripts of binaries pinned by a tools module of their
# own (hack/tools/<name>): CoreDNS, Traefik, the operators. The caller sets
# root and cache.
#   build_pinned <tools module> <module> <cache name> <binary> <import path> [ldflags]
# builds <binary> static and path-free (it runs in a one-layer image without
# libc) into ${cache}/<cache name>-<module version>/bin unless it is there,
# and sets pinned_bin to that directory. Build times go to stderr.
build_pinned() {
  local tools="${root}/hack/tools/$1" module="$2" name="$3" binary="$4" pkg="$5" ldflags="-s -w ${6:-}"
  local version
  version="$(cd "${tools}" && go list -m -f '{{.Version}}' "${module}")"
  pinned_bin="${cache}/${name}-${version}/bin"
  [[ -x "${pinned_bin}/${binary}" ]] && return 0
  mkdir -p "${pinned_bin}"
  local start=${SECONDS}
  echo "building ${binary} (${module} ${version}) ..." >&2
  (cd "${tools}" && GOFLAGS=-mod=mod CGO_ENABLED=0 go build -trimpath -ldflags "${ldflags}" -o "${pinned_bin}/${binary}.tmp" "${pkg}")
  mv "${pinned_bin}/${binary}.tmp" "${pinned_bin}/${binary}"
  echo "built ${binary} in $((SECONDS - start))s" >&2
}
