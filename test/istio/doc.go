// Package istio runs real Istio next to a harness cluster (test/cluster):
// istiod out of cluster as the sidecar injector, the real pilot-agent, and
// a stand-in for Envoy (test/cmd/envoy). Everything is built by
// hack/build-istio.sh from istio.io/istio at the version hack/tools/istio
// pins, and Istio's own injection templates, default values, mesh defaults
// and Envoy bootstrap template are read at run time from that build's cache
// directory (copied there from the Go module cache); none of Istio's files
// are part of this repository.
//
// Start renders the two ConfigMaps helm would render for the istio-discovery
// chart with its default values (plus the few overrides below), starts
// istiod against the cluster and registers its webhook the way the chart
// does. The overrides, and why:
//   - meshConfig.defaultConfig.interceptionMode NONE: Istio then injects no
//     istio-init container (istio-iptables as root with NET_ADMIN and
//     NET_RAW, rewriting the pod's netfilter rules, which the proxy image
//     here would need iptables for and nothing here tests). It is Istio's
//     own mesh-wide switch for proxies that do not capture traffic, and it
//     leaves the rest of the injected pod as any install gets it:
//     istio-proxy's position, hooks, args, env, probes, volumes and
//     securityContext (only ISTIO_META_INTERCEPTION_MODE reads NONE).
//     Istio's CNI variant (values.pilot.cni.enabled) was not chosen: it
//     still injects an istio-validation init container that checks the
//     redirection the CNI plugin (not run here) would have set up.
//   - global.proxy.image ProxyImage and global.imagePullPolicy IfNotPresent:
//     the injected proxy is a local image the node has imported.
//   - env.ENABLE_NATIVE_SIDECARS: how istiod is started (Options).
//
// Injected pods must name a service account: Istio's template adds a
// projected service-account token volume, which the API server rejects
// when spec.serviceAccountName is empty. A real cluster's ServiceAccount
// admission plugin fills in "default" before any webhook runs; the
// harness's API server runs without that plugin, so test pods set
// serviceAccountName themselves (ServiceAccount below).
package istio
