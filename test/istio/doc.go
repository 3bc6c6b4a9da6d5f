// Package istio runs real Istio next to a harness cluster (test/cluster):
// istiod out of cluster as the sidecar injector, Istio's CNI node agent on
// the real nodes, the real pilot-agent, and a stand-in for Envoy
// (test/cmd/envoy). Everything is built by hack/build-istio.sh from
// istio.io/istio at the version hack/tools/istio pins (one module file per
// release), and Istio's own charts (istio-discovery, istio-cni) are
// rendered at run time, from that build's cache directory, with Helm's own
// loader and template engine (Render), as `helm install` renders them: the
// chart's defaults, profiles (global.platform) and revision handling are
// Istio's. None of Istio's files are part of this repository.
//
// Start takes from istiod's rendered chart what an istiod outside the
// cluster needs: the ConfigMaps (mesh config and injector), the
// environment and arguments of its Deployment, and its
// MutatingWebhookConfiguration (the chart's istiodRemote values point it
// at the harness's istiod); Tag renders a revision tag's webhook the same
// way. InstallCNI applies the istio-cni chart as it renders (DaemonSet,
// ConfigMap, RBAC). The values the harness sets, and why:
//   - without CNI, meshConfig.defaultConfig.interceptionMode NONE: Istio
//     then injects no istio-init container (istio-iptables as root with
//     NET_ADMIN and NET_RAW) and captures no traffic; the proxy's
//     position, hooks, args, env, probes, volumes and securityContext are
//     what any install gets (only ISTIO_META_INTERCEPTION_MODE reads NONE).
//   - with CNI (Options.CNI), pilot.cni.enabled and Istio's default
//     interception, REDIRECT: pods get the unprivileged istio-validation
//     init container, the istio-cni plugin writes the capture rules into
//     each pod's network namespace at sandbox creation, and the Envoy
//     stand-in passes the captured connections through (15001 outbound,
//     15006 inbound), so an app's traffic goes through its proxy for real.
//     NONE cannot be combined with CNI: the plugin refuses pods annotated
//     with it.
//   - global.proxy.image ProxyImage, the CNI chart's image CNIImage, and
//     imagePullPolicy IfNotPresent: images built here, pulled from the
//     real nodes' registry.
//   - env.ENABLE_NATIVE_SIDECARS: how istiod is started (Options).
//   - revision and global.platform as the shape asks (Options).
//
// Injected pods must name a service account: Istio's template adds a
// projected service-account token volume, which the API server rejects
// when spec.serviceAccountName is empty. A real cluster's ServiceAccount
// admission plugin fills in "default" before any webhook runs; the kwok
// harness's API server runs without that plugin, so test pods set
// serviceAccountName themselves (ServiceAccount below).
package istio
