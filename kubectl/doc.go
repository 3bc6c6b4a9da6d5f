// Package kubectl is kubectl istio-aux, the kubectl plugin: its commands,
// flags, output and exit codes (Main). The commands' logic is in explain
// and check, the reads they share in install.
//
// The plugin is an application over istio-aux, not a part of it: nothing
// under bridge/, functions/, webhook/, internal/ or pkg/ imports it. What
// it shares with the components is names (pkg/names, pkg/keys) and the
// pure rules of pkg/decision and pkg/slim. It imports a component only
// where it must run that component's own logic to tell what it does:
//
//   - webhook/admission, the webhook's pure part: Mutate, on a pod as it
//     is now, says whether the webhook would add the hold and why not
//     (explain); Webhooks are the webhooks its reconciler writes, whose
//     selectors say which pods reach it (explain, check);
//     NewConfigFromConfigMap reads the mode as the webhook does (install).
//     Not package webhook: its controller, informers and leader election
//     are knative.dev/pkg's, which the plugin does not link (deps_test.go).
//   - webhook/proxyconfig: IstioHold reads proxy.istio.io/config's hold as
//     Istio does (explain).
//   - bridge/watch: ScopeOf and Scope.Admits say which pods the bridge
//     serves (explain, check).
//
// And internal/settings, the components' shared reading of
// config-istio-aux (Apply, Ignored, the defaults), to read it as they do.
// Only tests import more: explain's run the proxy-quit function to read
// its Events' words. deps_test.go holds this list, the layers and what the
// plugin's binary links.
package kubectl
