package injector

import (
	"context"

	"github.com/istio-aux/istio-aux/test/cluster"
)

// ServeCluster serves the injector for a harness cluster, with a serving
// certificate from the cluster's own CA (which the registration trusts).
func ServeCluster(ctx context.Context, c *cluster.Cluster) (stop func(), err error) {
	cert, key, err := c.CA().Serving()
	if err != nil {
		return nil, err
	}
	return Serve(ctx, c.Client(), c.CA().CertPEM, cert, key)
}
