package realnode

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/istio-aux/istio-aux/test/cluster"
	"github.com/istio-aux/istio-aux/test/images"
	"github.com/istio-aux/istio-aux/test/poll"
)

// What real nodes add to the control plane to make a whole cluster, as
// kubeadm would give one: kube-proxy (iptables mode) on every node, a
// registry the nodes pull every image from, local volumes, and CoreDNS
// serving cluster.ClusterDomain at DNSServiceIP.

// RegistryAddr is the registry's address, on the control plane's machine:
// containerd pulls from it, and ko and crane push to it (plain HTTP:
// go-containerregistry speaks HTTP to private addresses). Every image of
// the harness is named under images.Registry, which containerd maps to it.
const RegistryAddr = ControlPlaneIP + ":5000"

// DNSServiceIP is the cluster DNS's Service address (in
// cluster.ServiceCIDR), which the kubelet gives pods as their resolver.
const DNSServiceIP = "10.96.0.10"

// CoreDNSVersion is the github.com/coredns/coredns version that
// hack/tools/coredns requires and hack/build-coredns.sh caches under;
// TestToolVersionsMatch keeps them equal.
const CoreDNSVersion = "v1.15.0"

// ToolsBinDir holds ko and crane (hack/build-tools.sh).
func ToolsBinDir() string { return filepath.Join(cluster.CacheDir(), "tools", "bin") }

// CoreDNSBin is the cached CoreDNS build (hack/build-coredns.sh).
func CoreDNSBin() string {
	return filepath.Join(cluster.CacheDir(), "coredns-"+CoreDNSVersion, "bin", "coredns")
}

// startRegistry serves go-containerregistry's registry (crane registry
// serve) on RegistryAddr, its blobs under the cluster dir.
func (ns *Nodes) startRegistry(ctx context.Context) error {
	if err := os.Mkdir(ns.path("registry"), 0o700); err != nil {
		return err
	}
	p, err := ns.start("registry", filepath.Join(ToolsBinDir(), "crane"),
		"registry", "serve", "--address", RegistryAddr, "--disk", ns.path("registry"))
	if err != nil {
		return err
	}
	return p.WaitUp(ctx, 30*time.Second, func(ctx context.Context) error {
		return cluster.GetOK(ctx, "http://"+RegistryAddr+"/v2/")
	})
}

// PushImage pushes img to the node's registry, from which the node pulls
// it as pods name it (imagePullPolicy as users write it).
func PushImage(ctx context.Context, img images.Image) error {
	return img.Push(ctx, filepath.Join(ToolsBinDir(), "crane"), RegistryAddr)
}

// prepare does what every node needs once: the kubelets' RBAC, the sandbox
// image in the registry, kube-proxy's kubeconfig on the LAN, the local
// volumes' StorageClass.
func (ns *Nodes) prepare(ctx context.Context) error {
	if err := ns.nodeRBAC(ctx); err != nil {
		return err
	}
	pause, err := images.Pause(ctx, ns.path("images"))
	if err != nil {
		return err
	}
	if err := PushImage(ctx, pause); err != nil {
		return err
	}
	if err := ns.lanKubeconfig("kube-proxy"); err != nil {
		return err
	}
	return ns.c.Apply(ctx, []byte(localStorageClass))
}

// lanKubeconfig writes <name>-lan.kubeconfig: the control plane's identity
// name (<name>.kubeconfig), reaching the API server on the LAN, as a
// node's process must.
func (ns *Nodes) lanKubeconfig(name string) error {
	cfg, err := clientcmd.LoadFromFile(ns.path(name + ".kubeconfig"))
	if err != nil {
		return err
	}
	for _, cl := range cfg.Clusters {
		cl.Server = lanAPIServer
	}
	return clientcmd.WriteToFile(*cfg, ns.path(name+"-lan.kubeconfig"))
}

// kubeProxyConfig is kube-proxy's configuration: iptables mode in the
// node's network namespace; every node's pods are the cluster's. Conntrack's table size and timeouts are left
// as the kernel has them (0): nf_conntrack_max is not per namespace and is
// read-only inside one.
const kubeProxyConfig = `apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
clientConnection:
  kubeconfig: {{kubeconfig}}
hostnameOverride: {{node}}
mode: iptables
clusterCIDR: {{podCIDR}}
bindAddress: 0.0.0.0
healthzBindAddress: 127.0.0.1:10256
metricsBindAddress: 127.0.0.1:10249
conntrack:
  maxPerCore: 0
  min: 0
  tcpEstablishedTimeout: 0s
  tcpCloseWaitTimeout: 0s
`

// startKubeProxy runs kube-proxy and waits until it has programmed the
// kubernetes Service.
func (n *Node) startKubeProxy(ctx context.Context) error {
	cfg := strings.NewReplacer("{{kubeconfig}}", n.nodes.path("kube-proxy-lan.kubeconfig"), "{{node}}", n.name,
		"{{podCIDR}}", ClusterCIDR).Replace(kubeProxyConfig)
	if err := os.WriteFile(n.path("kube-proxy.yaml"), []byte(cfg), 0o600); err != nil {
		return err
	}
	p, err := n.start("kube-proxy", n.bin("kube-proxy"), "--config="+n.path("kube-proxy.yaml"), "--v=1")
	if err != nil {
		return err
	}
	// Programmed once the kubernetes Service answers on its cluster IP, as
	// the node's processes reach it (through the DNAT rule kube-proxy
	// wrote), with the API server itself.
	err = p.WaitUp(ctx, 60*time.Second, func(ctx context.Context) error {
		conn, err := n.DialContext(ctx, "tcp", net.JoinHostPort(cluster.KubernetesServiceIP, "443"))
		if err != nil {
			return fmt.Errorf("the kubernetes Service is not served yet: %w", err)
		}
		return conn.Close()
	})
	if err != nil {
		n.logNetwork()
	}
	return err
}

// logNetwork writes the node's routes, addresses and NAT rules to the
// cluster log: what explains a Service that cannot be reached.
func (n *Node) logNetwork() {
	for _, args := range [][]string{{"ip", "route"}, {"ip", "addr"}, {"iptables-save", "-t", "nat"}} {
		out, err := exec.Command("nsenter", append([]string{"--net=" + n.netns()}, args...)...).CombinedOutput()
		fmt.Fprintf(n.nodes.c.Log(), "harness| %s: %s (%v):\n%s\n", n.name, strings.Join(args, " "), err, out)
	}
}

// coreDNSManifests is the cluster DNS as kubeadm installs it, with the
// plugins hack/tools/coredns links. No forward plugin:
// there is nothing upstream to forward to.
const coreDNSManifests = `apiVersion: v1
kind: ServiceAccount
metadata:
  name: coredns
  namespace: kube-system
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata:
  name: system:coredns
rules:
  - apiGroups: [""]
    resources: [endpoints, services, pods, namespaces]
    verbs: [list, watch]
  - apiGroups: [discovery.k8s.io]
    resources: [endpointslices]
    verbs: [list, watch]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata:
  name: system:coredns
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: ClusterRole
  name: system:coredns
subjects:
  - kind: ServiceAccount
    name: coredns
    namespace: kube-system
---
apiVersion: v1
kind: ConfigMap
metadata:
  name: coredns
  namespace: kube-system
data:
  Corefile: |
    .:53 {
        errors
        health {
            lameduck 2s
        }
        ready
        kubernetes {{domain}} in-addr.arpa ip6.arpa {
            pods insecure
            ttl 30
        }
        prometheus :9153
        cache 30
        loop
        reload
        loadbalance
    }
---
apiVersion: apps/v1
kind: Deployment
metadata:
  name: coredns
  namespace: kube-system
  labels:
    k8s-app: kube-dns
spec:
  replicas: {{replicas}}
  selector:
    matchLabels:
      k8s-app: kube-dns
  template:
    metadata:
      labels:
        k8s-app: kube-dns
    spec:
      serviceAccountName: coredns
      priorityClassName: system-cluster-critical
      dnsPolicy: Default
      affinity:
        podAntiAffinity:
          preferredDuringSchedulingIgnoredDuringExecution:
            - weight: 100
              podAffinityTerm:
                topologyKey: kubernetes.io/hostname
                labelSelector:
                  matchLabels:
                    k8s-app: kube-dns
      tolerations:
        - key: node-role.kubernetes.io/control-plane
          effect: NoSchedule
      containers:
        - name: coredns
          image: {{image}}
          args: ["-conf", "/etc/coredns/Corefile"]
          ports:
            - {name: dns, containerPort: 53, protocol: UDP}
            - {name: dns-tcp, containerPort: 53, protocol: TCP}
            - {name: metrics, containerPort: 9153, protocol: TCP}
          readinessProbe:
            httpGet: {path: /ready, port: 8181}
            periodSeconds: 2
          livenessProbe:
            httpGet: {path: /health, port: 8080}
            initialDelaySeconds: 10
          volumeMounts:
            - {name: config, mountPath: /etc/coredns, readOnly: true}
      volumes:
        - name: config
          configMap:
            name: coredns
---
apiVersion: v1
kind: Service
metadata:
  name: kube-dns
  namespace: kube-system
  labels:
    k8s-app: kube-dns
spec:
  selector:
    k8s-app: kube-dns
  clusterIP: {{dnsIP}}
  ports:
    - {name: dns, port: 53, protocol: UDP}
    - {name: dns-tcp, port: 53, protocol: TCP}
    - {name: metrics, port: 9153, protocol: TCP}
`

// localStorageClass is the cluster's default StorageClass for the local
// volumes an administrator provisions by hand (startVolumes), as on a
// kubeadm cluster, which has no provisioner: a claim binds once its pod is
// scheduled, to a volume on the pod's node.
const localStorageClass = `apiVersion: storage.k8s.io/v1
kind: StorageClass
metadata:
  name: local
  annotations:
    storageclass.kubernetes.io/is-default-class: "true"
provisioner: kubernetes.io/no-provisioner
volumeBindingMode: WaitForFirstConsumer
reclaimPolicy: Retain
`

// localVolumes is how many PersistentVolumes each node offers.
const localVolumes = 8

// startVolumes creates each node's local PersistentVolumes: directories on
// its disk (its dir), reachable from that node only. They are writable by
// any user, whatever fsGroup a pod asks for.
func (ns *Nodes) startVolumes(ctx context.Context) error {
	for _, n := range ns.nodes {
		for i := range localVolumes {
			dir := n.path(fmt.Sprintf("volumes/local-%d", i))
			if err := os.MkdirAll(dir, 0o755); err != nil {
				return err
			}
			if err := os.Chmod(dir, 0o777|os.ModeSticky); err != nil {
				return err
			}
			pv := &corev1.PersistentVolume{
				ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("%s-local-%d", n.name, i)},
				Spec: corev1.PersistentVolumeSpec{
					Capacity:                      corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("10Gi")},
					AccessModes:                   []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
					PersistentVolumeReclaimPolicy: corev1.PersistentVolumeReclaimRetain,
					StorageClassName:              "local",
					PersistentVolumeSource:        corev1.PersistentVolumeSource{Local: &corev1.LocalVolumeSource{Path: dir}},
					NodeAffinity: &corev1.VolumeNodeAffinity{Required: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
						MatchExpressions: []corev1.NodeSelectorRequirement{{
							Key: corev1.LabelHostname, Operator: corev1.NodeSelectorOpIn, Values: []string{n.name}}},
					}}}},
				},
			}
			if _, err := ns.c.Client().CoreV1().PersistentVolumes().Create(ctx, pv, metav1.CreateOptions{}); err != nil {
				return err
			}
		}
	}
	return nil
}

// startClusterDNS pushes the CoreDNS image, installs CoreDNS (two replicas
// on two nodes where there are two, as kubeadm) and waits until it answers
// for the kubernetes Service through its own Service, asked from the first
// node: the scheduler, the registry, a kubelet and kube-proxy all had to
// work.
func (ns *Nodes) startClusterDNS(ctx context.Context) error {
	img := images.Image{
		Ref:        images.Registry + "/coredns:" + CoreDNSVersion,
		Files:      []images.File{{Path: "/coredns", Mode: 0o755, Src: CoreDNSBin()}},
		Entrypoint: []string{"/coredns"},
	}
	if err := PushImage(ctx, img); err != nil {
		return err
	}
	manifests := strings.NewReplacer("{{domain}}", cluster.ClusterDomain, "{{image}}", img.Ref, "{{dnsIP}}", DNSServiceIP,
		"{{replicas}}", fmt.Sprint(min(2, len(ns.nodes)))).Replace(coreDNSManifests)
	if err := ns.c.Apply(ctx, []byte(manifests)); err != nil {
		return err
	}
	want := "kubernetes.default.svc." + cluster.ClusterDomain
	r := ns.nodes[0].Resolver()
	err := poll.Until(ctx, 2*time.Minute, func(ctx context.Context) (bool, error) {
		addrs, err := r.LookupHost(ctx, want)
		if err != nil {
			return false, err
		}
		return len(addrs) == 1 && addrs[0] == cluster.KubernetesServiceIP, fmt.Errorf("%s resolves to %v", want, addrs)
	})
	if err != nil {
		return fmt.Errorf("cluster DNS: %w (coredns pods: %s)", err, ns.c.PodsSummary(ctx, "kube-system", "k8s-app=kube-dns"))
	}
	return nil
}

// Resolver asks the cluster DNS, as the node's pods do: through its
// Service, from inside the node.
func (n *Node) Resolver() *net.Resolver {
	return &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, network, _ string) (net.Conn, error) {
		return n.DialContext(ctx, network, net.JoinHostPort(DNSServiceIP, "53"))
	}}
}
