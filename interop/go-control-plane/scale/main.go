// Command go-xds-scale is the go-control-plane management server of the
// end-to-end benchmark (e2e/ at the repository root): one snapshot, served over
// SotW and delta ADS to any node, shaped like the benchmark's workload:
//   - one client-side API listener (LDS) whose HttpConnectionManager takes its
//     route configuration over RDS from ADS, with the router filter;
//   - one route configuration (RDS) with one route per cluster,
//     prefix "/svc-N/" -> cluster "cluster-N";
//   - N clusters (CDS, type EDS, endpoints over ADS, round robin), named
//     cluster-00000 .. (five digits);
//   - N ClusterLoadAssignments (EDS) of the same names, one locality, one
//     endpoint on 127.0.0.1.
//
// By default the snapshot cache answers each request at once with the
// resources it names (-ads=false in interop/go-control-plane/server.go's
// terms); -ads makes it wait until a CDS or EDS request names every resource.
// It serves delta ADS from the same cache; the counters cover both.
//
// Stdout: "READY <port>" once serving. Stdin, one command a line:
//
//	stats   print "STATS requests=<n> responses=<n> response_bytes=<n>" and reset
//	quit    exit
//
// The server exits when stdin closes, so it never outlives the harness.
package main

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"net"
	"os"
	"strings"
	"sync/atomic"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	routerv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	cachev3 "github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	"github.com/envoyproxy/go-control-plane/pkg/log"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	serverv3 "github.com/envoyproxy/go-control-plane/pkg/server/v3"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"
)

// ClusterName is the name of cluster i (also its EDS resource name).
func ClusterName(i int) string { return fmt.Sprintf("cluster-%05d", i) }

func mustAny(m proto.Message) *anypb.Any {
	a, err := anypb.New(m)
	if err != nil {
		panic(err)
	}
	return a
}

func adsSource() *corev3.ConfigSource {
	return &corev3.ConfigSource{
		ResourceApiVersion:    corev3.ApiVersion_V3,
		ConfigSourceSpecifier: &corev3.ConfigSource_Ads{Ads: &corev3.AggregatedConfigSource{}},
	}
}

func makeListener(listener, route string) *listenerv3.Listener {
	hcm := &hcmv3.HttpConnectionManager{
		StatPrefix: "scale",
		RouteSpecifier: &hcmv3.HttpConnectionManager_Rds{Rds: &hcmv3.Rds{
			ConfigSource:    adsSource(),
			RouteConfigName: route,
		}},
		HttpFilters: []*hcmv3.HttpFilter{{
			Name:       "envoy.filters.http.router",
			ConfigType: &hcmv3.HttpFilter_TypedConfig{TypedConfig: mustAny(&routerv3.Router{})},
		}},
	}
	return &listenerv3.Listener{Name: listener, ApiListener: &listenerv3.ApiListener{ApiListener: mustAny(hcm)}}
}

func makeRoute(route string, n int) *routev3.RouteConfiguration {
	routes := make([]*routev3.Route, 0, n)
	for i := 0; i < n; i++ {
		routes = append(routes, &routev3.Route{
			Match: &routev3.RouteMatch{PathSpecifier: &routev3.RouteMatch_Prefix{Prefix: fmt.Sprintf("/svc-%d/", i)}},
			Action: &routev3.Route_Route{Route: &routev3.RouteAction{
				ClusterSpecifier: &routev3.RouteAction_Cluster{Cluster: ClusterName(i)},
			}},
		})
	}
	return &routev3.RouteConfiguration{
		Name:         route,
		VirtualHosts: []*routev3.VirtualHost{{Name: "scale", Domains: []string{"*"}, Routes: routes}},
	}
}

func makeCluster(i int) *clusterv3.Cluster {
	return &clusterv3.Cluster{
		Name:                 ClusterName(i),
		ClusterDiscoveryType: &clusterv3.Cluster_Type{Type: clusterv3.Cluster_EDS},
		EdsClusterConfig:     &clusterv3.Cluster_EdsClusterConfig{EdsConfig: adsSource()},
		LbPolicy:             clusterv3.Cluster_ROUND_ROBIN,
		ConnectTimeout:       durationpb.New(time.Second),
	}
}

func makeEndpoints(i int) *endpointv3.ClusterLoadAssignment {
	return &endpointv3.ClusterLoadAssignment{
		ClusterName: ClusterName(i),
		Endpoints: []*endpointv3.LocalityLbEndpoints{{
			Locality: &corev3.Locality{Region: "scale-region", Zone: "scale-zone"},
			LbEndpoints: []*endpointv3.LbEndpoint{{
				HostIdentifier: &endpointv3.LbEndpoint_Endpoint{Endpoint: &endpointv3.Endpoint{
					Address: &corev3.Address{Address: &corev3.Address_SocketAddress{SocketAddress: &corev3.SocketAddress{
						Protocol:      corev3.SocketAddress_TCP,
						Address:       "127.0.0.1",
						PortSpecifier: &corev3.SocketAddress_PortValue{PortValue: uint32(10000 + i%50000)},
					}}},
				}},
				HealthStatus: corev3.HealthStatus_HEALTHY,
			}},
		}},
	}
}

// counters are what "stats" reports.
type counters struct{ requests, responses, responseBytes atomic.Int64 }

func main() {
	port := flag.Int("port", 0, "TCP port on 127.0.0.1 (0: a free one; the READY line says which)")
	n := flag.Int("clusters", 10000, "number of clusters, and of endpoint sets")
	listener := flag.String("listener", "scale.example.com", "the API listener's name")
	route := flag.String("route", "scale-route", "the route configuration's name")
	ads := flag.Bool("ads", false, "ADS mode: answer a CDS or EDS request only once it names every resource of its type")
	flag.Parse()

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	clusters := make([]types.Resource, 0, *n)
	endpoints := make([]types.Resource, 0, *n)
	for i := 0; i < *n; i++ {
		clusters = append(clusters, makeCluster(i))
		endpoints = append(endpoints, makeEndpoints(i))
	}
	snap, err := cachev3.NewSnapshot("1", map[resourcev3.Type][]types.Resource{
		resourcev3.ListenerType: {makeListener(*listener, *route)},
		resourcev3.RouteType:    {makeRoute(*route, *n)},
		resourcev3.ClusterType:  clusters,
		resourcev3.EndpointType: endpoints,
	})
	if err != nil {
		fmt.Fprintf(os.Stderr, "go-xds-scale: snapshot: %v\n", err)
		os.Exit(1)
	}
	// Every node gets the same snapshot: the cache is keyed by one constant.
	cache := cachev3.NewSnapshotCache(*ads, constantHash{}, log.LoggerFuncs{})
	if err := cache.SetSnapshot(ctx, "scale", snap); err != nil {
		fmt.Fprintf(os.Stderr, "go-xds-scale: set snapshot: %v\n", err)
		os.Exit(1)
	}

	var c counters
	callbacks := serverv3.CallbackFuncs{
		StreamRequestFunc: func(int64, *discoveryv3.DiscoveryRequest) error {
			c.requests.Add(1)
			return nil
		},
		StreamResponseFunc: func(_ context.Context, _ int64, _ *discoveryv3.DiscoveryRequest, resp *discoveryv3.DiscoveryResponse) {
			c.responses.Add(1)
			c.responseBytes.Add(int64(proto.Size(resp)))
		},
		StreamDeltaRequestFunc: func(int64, *discoveryv3.DeltaDiscoveryRequest) error {
			c.requests.Add(1)
			return nil
		},
		StreamDeltaResponseFunc: func(_ int64, _ *discoveryv3.DeltaDiscoveryRequest, resp *discoveryv3.DeltaDiscoveryResponse) {
			c.responses.Add(1)
			c.responseBytes.Add(int64(proto.Size(resp)))
		},
	}
	grpcServer := grpc.NewServer(grpc.MaxRecvMsgSize(64 << 20))
	discoveryv3.RegisterAggregatedDiscoveryServiceServer(grpcServer, serverv3.NewServer(ctx, cache, callbacks))

	lis, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", *port))
	if err != nil {
		fmt.Fprintf(os.Stderr, "go-xds-scale: listen: %v\n", err)
		os.Exit(1)
	}
	go func() {
		if err := grpcServer.Serve(lis); err != nil {
			fmt.Fprintf(os.Stderr, "go-xds-scale: serve: %v\n", err)
			os.Exit(1)
		}
	}()
	fmt.Printf("READY %d\n", lis.Addr().(*net.TCPAddr).Port)

	in := bufio.NewScanner(os.Stdin)
	for in.Scan() {
		switch strings.TrimSpace(in.Text()) {
		case "stats":
			fmt.Printf("STATS requests=%d responses=%d response_bytes=%d\n",
				c.requests.Swap(0), c.responses.Swap(0), c.responseBytes.Swap(0))
		case "quit":
			grpcServer.Stop()
			return
		}
	}
	grpcServer.Stop()
}

// constantHash maps every node to the one snapshot.
type constantHash struct{}

func (constantHash) ID(*corev3.Node) string { return "scale" }
