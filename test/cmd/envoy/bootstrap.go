package main

import (
	"fmt"
	"net"
	"os"
	"strconv"

	"sigs.k8s.io/yaml"
)

// bootstrap is the part of Envoy's bootstrap configuration (the file
// pilot-agent renders from envoy_bootstrap_tmpl.json and passes with -c)
// that the stand-in acts on: where the admin API listens, the static
// listeners, and the routes from a listener's path prefix to a static
// cluster, and the node's metadata, where pilot-agent says how the pod's
// traffic is captured. Everything else (xDS, SDS, tracing, stats sinks) is
// ignored.
type bootstrap struct {
	Node struct {
		Metadata struct {
			// InterceptionMode is the pod's (ISTIO_META_INTERCEPTION_MODE,
			// from the injector): REDIRECT when absent, as istiod reads it.
			InterceptionMode string `json:"INTERCEPTION_MODE"`
		} `json:"metadata"`
	} `json:"node"`
	Admin struct {
		Address address `json:"address"`
	} `json:"admin"`
	StaticResources struct {
		Listeners []listener `json:"listeners"`
		Clusters  []cluster  `json:"clusters"`
	} `json:"static_resources"`
}

type address struct {
	SocketAddress struct {
		Address   string `json:"address"`
		PortValue int    `json:"port_value"`
	} `json:"socket_address"`
}

func (a address) hostPort() string {
	return net.JoinHostPort(a.SocketAddress.Address, strconv.Itoa(a.SocketAddress.PortValue))
}

type listener struct {
	Name         string  `json:"name"`
	Address      address `json:"address"`
	FilterChains []struct {
		Filters []struct {
			TypedConfig struct {
				RouteConfig struct {
					VirtualHosts []struct {
						Routes []struct {
							Match struct {
								Prefix string `json:"prefix"`
							} `json:"match"`
							Route struct {
								Cluster string `json:"cluster"`
							} `json:"route"`
						} `json:"routes"`
					} `json:"virtual_hosts"`
				} `json:"route_config"`
			} `json:"typed_config"`
		} `json:"filters"`
	} `json:"filter_chains"`
}

type cluster struct {
	Name           string `json:"name"`
	LoadAssignment struct {
		Endpoints []struct {
			LbEndpoints []struct {
				Endpoint struct {
					Address address `json:"address"`
				} `json:"endpoint"`
			} `json:"lb_endpoints"`
		} `json:"endpoints"`
	} `json:"load_assignment"`
}

// interceptionMode is how the pod's traffic reaches the proxy: REDIRECT
// (istiod's default), TPROXY or NONE.
func (b *bootstrap) interceptionMode() string {
	if m := b.Node.Metadata.InterceptionMode; m != "" {
		return m
	}
	return "REDIRECT"
}

// route sends requests under a path prefix to a static cluster's address,
// as the istio bootstrap's status listener (15021: /healthz/ready → the
// agent on 15020) and Prometheus listener (15090: /stats/prometheus → the
// admin API) do.
type route struct {
	prefix, target string
}

// readBootstrap parses the rendered bootstrap (JSON; parsed as YAML, which
// accepts it and is as lenient as Envoy's own loader).
func readBootstrap(path string) (*bootstrap, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var b bootstrap
	if err := yaml.Unmarshal(data, &b); err != nil {
		return nil, fmt.Errorf("parsing %s: %w", path, err)
	}
	if b.Admin.Address.SocketAddress.PortValue == 0 {
		return nil, fmt.Errorf("%s: no admin address", path)
	}
	return &b, nil
}

// routes lists a listener's prefix routes to clusters that have a static
// endpoint; routes to dynamic (xDS) clusters are dropped.
func (b *bootstrap) routes(l listener) []route {
	endpoints := map[string]string{}
	for _, c := range b.StaticResources.Clusters {
		for _, e := range c.LoadAssignment.Endpoints {
			for _, lb := range e.LbEndpoints {
				if lb.Endpoint.Address.SocketAddress.PortValue != 0 {
					endpoints[c.Name] = lb.Endpoint.Address.hostPort()
				}
			}
		}
	}
	var out []route
	for _, fc := range l.FilterChains {
		for _, f := range fc.Filters {
			for _, vh := range f.TypedConfig.RouteConfig.VirtualHosts {
				for _, r := range vh.Routes {
					if target, ok := endpoints[r.Route.Cluster]; ok && r.Match.Prefix != "" {
						out = append(out, route{prefix: r.Match.Prefix, target: target})
					}
				}
			}
		}
	}
	return out
}
