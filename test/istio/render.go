package istio

import (
	"fmt"
	"strings"

	"helm.sh/helm/v4/pkg/chart/common"
	chartutil "helm.sh/helm/v4/pkg/chart/common/util"
	"helm.sh/helm/v4/pkg/chart/loader"
	"helm.sh/helm/v4/pkg/engine"
	releaseutil "helm.sh/helm/v4/pkg/release/v1/util"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"
)

// Render renders one of Istio's charts (a directory hack/build-istio.sh
// copied from the release's module) with Helm's own loader and template
// engine, as `helm template NAME DIR -n NAMESPACE --kube-version VERSION`
// with values given by --set would: the chart's defaults, its profiles
// (global.platform, profile) and its legacy-key translations are the
// chart's own. It returns the objects in the order Helm installs them;
// hooks and notes are left out (Istio's charts have none that install
// anything).
func Render(dir, name, namespace, kubeVersion string, values map[string]any) ([]*unstructured.Unstructured, error) {
	ch, err := loader.Load(dir)
	if err != nil {
		return nil, fmt.Errorf("loading chart %s: %w", dir, err)
	}
	caps := common.DefaultCapabilities.Copy()
	if kubeVersion != "" {
		kv, err := common.ParseKubeVersion(kubeVersion)
		if err != nil {
			return nil, err
		}
		caps.KubeVersion = *kv
	}
	opts := common.ReleaseOptions{Name: name, Namespace: namespace, Revision: 1, IsInstall: true}
	top, err := chartutil.ToRenderValues(ch, deepCopy(values).(map[string]any), opts, caps)
	if err != nil {
		return nil, fmt.Errorf("chart %s: %w", dir, err)
	}
	files, err := engine.Render(ch, top)
	if err != nil {
		return nil, fmt.Errorf("rendering chart %s: %w", dir, err)
	}
	for f := range files {
		if strings.HasSuffix(f, "NOTES.txt") {
			delete(files, f)
		}
	}
	_, manifests, err := releaseutil.SortManifests(files, caps.APIVersions, releaseutil.InstallOrder)
	if err != nil {
		return nil, fmt.Errorf("chart %s: %w", dir, err)
	}
	var out []*unstructured.Unstructured
	for _, m := range manifests {
		var obj map[string]any
		if err := yaml.Unmarshal([]byte(m.Content), &obj); err != nil {
			return nil, fmt.Errorf("chart %s: %s: %w", dir, m.Name, err)
		}
		if len(obj) == 0 {
			continue
		}
		out = append(out, &unstructured.Unstructured{Object: obj})
	}
	return out, nil
}

// Find is the rendered object of kind and name, or nil.
func Find(objs []*unstructured.Unstructured, kind, name string) *unstructured.Unstructured {
	for _, o := range objs {
		if o.GetKind() == kind && o.GetName() == name {
			return o
		}
	}
	return nil
}
