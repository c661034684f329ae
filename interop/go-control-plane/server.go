// Command go-xds-server is a small xDS management server built on
// go-control-plane's snapshot cache and ADS server. It is the third-party peer
// of xds-proto's interop test (tests/tests/interop_go_control_plane.rs).
//
// It serves, for one node id, over ADS only, both State of the World
// (StreamAggregatedResources) and delta (DeltaAggregatedResources: the snapshot
// cache computes each resource's version as a hash of its bytes, sends a delta
// stream only the resources whose version differs from what the stream has,
// initial_resource_versions included, and names removed ones):
//   - one client-side API listener (LDS) whose HttpConnectionManager gets its
//     route configuration over RDS from ADS, with the router filter;
//   - one route configuration (RDS) with one route per cluster,
//     prefix "/svc-NNNN/" -> cluster "cluster-NNNN";
//   - N clusters (CDS, type EDS, endpoints over ADS, round robin);
//   - N ClusterLoadAssignments (EDS), one locality each, endpoints on 127.0.0.1.
//
// With -invalid-cluster i, cluster i takes its endpoints from a file path
// config source, which gRPC clients reject: a way to provoke a NACK.
//
// With -split "W0:P0,W1:P1,...", the snapshot also serves a data-plane target:
// listener split.example.com -> route configuration split-route, whose one route
// ("/", any domain) splits over clusters split-0, split-1, ... by weights W0, W1,
// ...; cluster split-k is EDS, round robin, with one endpoint 127.0.0.1:Pk. The
// channel interop test sends RPCs through it to echo backends on those ports.
//
// Endpoint epoch e (starting at 1; "update" bumps it) gives cluster i (0-based)
// the endpoint 127.0.0.1:EndpointPort(e, i) = 20000 + ((e-1) mod 20)*2000 + i
// (N may be at most 2000), plus, with -endpoints K > 1, the same port on
// 127.0.0.2 .. 127.0.0.K. Every command that changes the snapshot bumps the
// snapshot version v (starting at 1), which every resource type carries; while
// only "update" is used, e = v.
//
// The snapshot cache runs in ADS mode by default, as ADS control planes built
// on go-control-plane usually do: it answers a CDS or EDS request only once the
// request names every cluster of the snapshot, so a client that subscribes to
// clusters one by one gets its first CDS response when it has asked for all of
// them (the "not responding" warnings on stderr say so). With -ads=false every
// request is answered at once with the resources it names.
//
// Line protocol. Commands on stdin, one a line:
//
//	update            install snapshot version v+1 with new endpoints for every cluster
//	touch-cluster i   install snapshot version v+1 in which only cluster i changed
//	                  (its circuit breaker's max_requests becomes 100*t at its t-th touch)
//	remove-cluster i  install snapshot version v+1 without cluster i and its endpoints
//	restart           drop every connection and listen again on the same port, with the
//	                  same cache (clients reconnect: delta ones with initial_resource_versions)
//	stats             print counters (see below)
//	quit              exit
//
// SIGUSR1 does the same as "update". With -exit-on-eof (the default) the
// server exits when stdin closes, so it never outlives the test that started it.
//
// Lines on stdout (stable, for tests):
//
//	READY <port>
//	UPDATED <version>
//	RESTARTED <port>
//	NACK type=<type_url> version=<rejected version> nonce=<nonce> error=<quoted message>
//	STATS <key>=<value> ...            (one line, in answer to "stats")
//	TYPE <type_url> <key>=<value> ...  (one line per type seen, before the STATS line)
//
// STATS keys: version (installed snapshot), streams, requests, responses,
// acks, nacks, unanswered (responses that got neither ACK nor NACK yet).
// TYPE keys: sent (version of the last response), acked (version of the last
// ACK), responses, acks, nacks, requests, names (resource names in the
// last request; on delta, the names it subscribed to), resources and removed
// (resources and removed names in the last response), initial (delta: the
// initial_resource_versions of the last request that had any), settled
// (whether the last response was ACKed or NACKed).
// STATS keys also count delta_streams and delta_requests.
//
// Every request and response is also logged on stderr, one line each:
//
//	REQ stream=<id> type=<url> version=<v> nonce=<n> names=<count> ack|nack|initial [error=...]
//	RESP stream=<id> type=<url> version=<v> nonce=<n> resources=<count>
//	DREQ stream=<id> type=<url> nonce=<n> subscribe=<count> unsubscribe=<count> initial=<count> ack|nack|initial [error=...]
//	DRESP stream=<id> type=<url> version=<v> nonce=<n> resources=<count> removed=<count> bytes=<size>
package main

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"net"
	"os"
	"os/signal"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
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
	"google.golang.org/grpc/keepalive"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

type config struct {
	port         int
	nodeID       string
	clusters     int
	endpoints    int
	listenerName string
	routeName    string
	ads          bool
	invalid      int
	exitOnEOF    bool
	verbose      bool
	split        []splitTarget
}

// EndpointPort is the port of cluster i's endpoints at snapshot version v.
func EndpointPort(version, i int) int {
	return 20000 + ((version-1)%20)*2000 + i
}

// ClusterName is the name of cluster i (also the EDS resource name).
func ClusterName(i int) string { return fmt.Sprintf("cluster-%04d", i) }

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

func makeListener(cfg *config) *listenerv3.Listener {
	hcm := &hcmv3.HttpConnectionManager{
		StatPrefix: "interop",
		RouteSpecifier: &hcmv3.HttpConnectionManager_Rds{Rds: &hcmv3.Rds{
			ConfigSource:    adsSource(),
			RouteConfigName: cfg.routeName,
		}},
		HttpFilters: []*hcmv3.HttpFilter{{
			Name:       "envoy.filters.http.router",
			ConfigType: &hcmv3.HttpFilter_TypedConfig{TypedConfig: mustAny(&routerv3.Router{})},
		}},
	}
	return &listenerv3.Listener{
		Name:        cfg.listenerName,
		ApiListener: &listenerv3.ApiListener{ApiListener: mustAny(hcm)},
	}
}

func makeRoute(cfg *config) *routev3.RouteConfiguration {
	routes := make([]*routev3.Route, 0, cfg.clusters)
	for i := 0; i < cfg.clusters; i++ {
		routes = append(routes, &routev3.Route{
			Name: fmt.Sprintf("route-%04d", i),
			Match: &routev3.RouteMatch{
				PathSpecifier: &routev3.RouteMatch_Prefix{Prefix: fmt.Sprintf("/svc-%04d/", i)},
			},
			Action: &routev3.Route_Route{Route: &routev3.RouteAction{
				ClusterSpecifier: &routev3.RouteAction_Cluster{Cluster: ClusterName(i)},
			}},
		})
	}
	return &routev3.RouteConfiguration{
		Name: cfg.routeName,
		VirtualHosts: []*routev3.VirtualHost{{
			Name:    "interop-vhost",
			Domains: []string{"*"},
			Routes:  routes,
		}},
	}
}

// world is what the snapshot is built from: the commands change it.
type world struct {
	version int          // snapshot version
	epoch   int          // endpoint epoch (see EndpointPort)
	touches map[int]int  // cluster index -> times touched
	removed map[int]bool // removed cluster indices
}

func newWorld() *world {
	return &world{version: 1, epoch: 1, touches: map[int]int{}, removed: map[int]bool{}}
}

func makeCluster(cfg *config, w *world, i int) *clusterv3.Cluster {
	eds := adsSource()
	if i == cfg.invalid {
		// gRPC clients accept only ads or self config sources for EDS.
		eds = &corev3.ConfigSource{
			ResourceApiVersion:    corev3.ApiVersion_V3,
			ConfigSourceSpecifier: &corev3.ConfigSource_Path{Path: "/nonexistent/eds.yaml"},
		}
	}
	c := &clusterv3.Cluster{
		Name:                 ClusterName(i),
		ClusterDiscoveryType: &clusterv3.Cluster_Type{Type: clusterv3.Cluster_EDS},
		EdsClusterConfig:     &clusterv3.Cluster_EdsClusterConfig{EdsConfig: eds},
		LbPolicy:             clusterv3.Cluster_ROUND_ROBIN,
		ConnectTimeout:       durationpb.New(time.Second),
	}
	if t := w.touches[i]; t > 0 {
		c.CircuitBreakers = &clusterv3.CircuitBreakers{Thresholds: []*clusterv3.CircuitBreakers_Thresholds{{
			MaxRequests: wrapperspb.UInt32(uint32(100 * t)),
		}}}
	}
	return c
}

func makeEndpoints(cfg *config, epoch, i int) *endpointv3.ClusterLoadAssignment {
	port := uint32(EndpointPort(epoch, i))
	lbs := make([]*endpointv3.LbEndpoint, 0, cfg.endpoints)
	for k := 0; k < cfg.endpoints; k++ {
		lbs = append(lbs, &endpointv3.LbEndpoint{
			HostIdentifier: &endpointv3.LbEndpoint_Endpoint{Endpoint: &endpointv3.Endpoint{
				Address: &corev3.Address{Address: &corev3.Address_SocketAddress{SocketAddress: &corev3.SocketAddress{
					Protocol:      corev3.SocketAddress_TCP,
					Address:       fmt.Sprintf("127.0.0.%d", k+1),
					PortSpecifier: &corev3.SocketAddress_PortValue{PortValue: port},
				}}},
			}},
			HealthStatus:        corev3.HealthStatus_HEALTHY,
			LoadBalancingWeight: wrapperspb.UInt32(1),
		})
	}
	return &endpointv3.ClusterLoadAssignment{
		ClusterName: ClusterName(i),
		Endpoints: []*endpointv3.LocalityLbEndpoints{{
			Locality:            &corev3.Locality{Region: "interop-region", Zone: "interop-zone"},
			LbEndpoints:         lbs,
			LoadBalancingWeight: wrapperspb.UInt32(1),
		}},
	}
}

// makeSnapshot builds the snapshot of `w`. It is consistent by construction
// (a removed cluster keeps its route, which a client may watch or not);
// Snapshot.Consistent() is not used because it does not follow an API
// listener's RDS reference (it counts only socket listeners' routes).
func makeSnapshot(cfg *config, w *world) (*cachev3.Snapshot, error) {
	clusters := make([]types.Resource, 0, cfg.clusters)
	endpoints := make([]types.Resource, 0, cfg.clusters)
	for i := 0; i < cfg.clusters; i++ {
		if w.removed[i] {
			continue
		}
		clusters = append(clusters, makeCluster(cfg, w, i))
		endpoints = append(endpoints, makeEndpoints(cfg, w.epoch, i))
	}
	resources := map[resourcev3.Type][]types.Resource{
		resourcev3.ListenerType: {makeListener(cfg)},
		resourcev3.RouteType:    {makeRoute(cfg)},
		resourcev3.ClusterType:  clusters,
		resourcev3.EndpointType: endpoints,
	}
	addSplit(cfg, resources)
	return cachev3.NewSnapshot(strconv.Itoa(w.version), resources)
}

// ---- the data-plane split (-split) ----

// splitTarget is one weighted cluster of the split target: its route weight and
// the port of its one endpoint on 127.0.0.1.
type splitTarget struct{ weight, port uint32 }

// parseSplit reads -split's "W0:P0,W1:P1,...".
func parseSplit(s string) ([]splitTarget, error) {
	var targets []splitTarget
	for _, part := range strings.Split(s, ",") {
		w, p, ok := strings.Cut(part, ":")
		weight, errW := strconv.ParseUint(w, 10, 32)
		port, errP := strconv.ParseUint(p, 10, 16)
		if !ok || errW != nil || errP != nil || weight == 0 || port == 0 {
			return nil, fmt.Errorf("-split wants WEIGHT:PORT,...; got %q", part)
		}
		targets = append(targets, splitTarget{uint32(weight), uint32(port)})
	}
	return targets, nil
}

// addSplit adds the split target's listener, route configuration, clusters and
// endpoints to a snapshot's resources (nothing without -split).
func addSplit(cfg *config, resources map[resourcev3.Type][]types.Resource) {
	if len(cfg.split) == 0 {
		return
	}
	listenerCfg := *cfg
	listenerCfg.listenerName, listenerCfg.routeName = "split.example.com", "split-route"
	weighted := &routev3.WeightedCluster{}
	for k, t := range cfg.split {
		name := fmt.Sprintf("split-%d", k)
		weighted.Clusters = append(weighted.Clusters, &routev3.WeightedCluster_ClusterWeight{
			Name: name, Weight: wrapperspb.UInt32(t.weight),
		})
		resources[resourcev3.ClusterType] = append(resources[resourcev3.ClusterType], &clusterv3.Cluster{
			Name:                 name,
			ClusterDiscoveryType: &clusterv3.Cluster_Type{Type: clusterv3.Cluster_EDS},
			EdsClusterConfig:     &clusterv3.Cluster_EdsClusterConfig{EdsConfig: adsSource()},
			LbPolicy:             clusterv3.Cluster_ROUND_ROBIN,
			ConnectTimeout:       durationpb.New(time.Second),
		})
		resources[resourcev3.EndpointType] = append(resources[resourcev3.EndpointType], &endpointv3.ClusterLoadAssignment{
			ClusterName: name,
			Endpoints: []*endpointv3.LocalityLbEndpoints{{
				Locality: &corev3.Locality{Region: "interop-region", Zone: "interop-zone"},
				LbEndpoints: []*endpointv3.LbEndpoint{{
					HostIdentifier: &endpointv3.LbEndpoint_Endpoint{Endpoint: &endpointv3.Endpoint{
						Address: &corev3.Address{Address: &corev3.Address_SocketAddress{SocketAddress: &corev3.SocketAddress{
							Protocol:      corev3.SocketAddress_TCP,
							Address:       "127.0.0.1",
							PortSpecifier: &corev3.SocketAddress_PortValue{PortValue: t.port},
						}}},
					}},
					HealthStatus: corev3.HealthStatus_HEALTHY,
				}},
				LoadBalancingWeight: wrapperspb.UInt32(1),
			}},
		})
	}
	resources[resourcev3.ListenerType] = append(resources[resourcev3.ListenerType], makeListener(&listenerCfg))
	resources[resourcev3.RouteType] = append(resources[resourcev3.RouteType], &routev3.RouteConfiguration{
		Name: "split-route",
		VirtualHosts: []*routev3.VirtualHost{{
			Name:    "split-vhost",
			Domains: []string{"*"},
			Routes: []*routev3.Route{{
				Name:  "split",
				Match: &routev3.RouteMatch{PathSpecifier: &routev3.RouteMatch_Prefix{Prefix: "/"}},
				Action: &routev3.Route_Route{Route: &routev3.RouteAction{
					ClusterSpecifier: &routev3.RouteAction_WeightedClusters{WeightedClusters: weighted},
				}},
			}},
		}},
	})
}

// ---- request/ACK bookkeeping ----

type sentResponse struct {
	typeURL string
	version string
	state   int // 0 unanswered, 1 acked, 2 nacked
}

type typeStats struct {
	sent, acked                 string
	responses, acks, nacks, req int
	names                       int
	resources, removed, initial int
	last                        string // "<stream>/<nonce>" of the last response
}

type tracker struct {
	mu            sync.Mutex
	out           *bufio.Writer // stdout, guarded by mu
	streams       int
	deltaStreams  int
	deltaRequests int
	requests      int
	responses     int
	acks          int
	nacks         int
	sent          map[string]*sentResponse // by "<stream>/<nonce>"
	types         map[string]*typeStats
	version       int
}

func newTracker() *tracker {
	return &tracker{
		out:   bufio.NewWriter(os.Stdout),
		sent:  map[string]*sentResponse{},
		types: map[string]*typeStats{},
	}
}

// println writes one protocol line to stdout; the caller holds t.mu.
func (t *tracker) println(format string, args ...interface{}) {
	fmt.Fprintf(t.out, format+"\n", args...)
	t.out.Flush()
}

func (t *tracker) typ(url string) *typeStats {
	s, ok := t.types[url]
	if !ok {
		s = &typeStats{}
		t.types[url] = s
	}
	return s
}

func (t *tracker) onRequest(stream int64, req *discoveryv3.DiscoveryRequest) {
	t.mu.Lock()
	defer t.mu.Unlock()
	ts := t.countRequest(stream, req.GetTypeUrl(), req.GetResponseNonce(), req.GetErrorDetail() != nil)
	ts.names = len(req.GetResourceNames())
	errText := ""
	if d := req.GetErrorDetail(); d != nil {
		errText = fmt.Sprintf(" error=%q", d.GetMessage())
		t.println("NACK type=%s version=%s nonce=%s error=%q", req.GetTypeUrl(), req.GetVersionInfo(), req.GetResponseNonce(), d.GetMessage())
	}
	fmt.Fprintf(os.Stderr, "REQ stream=%d type=%s version=%q nonce=%q names=%d %s%s\n",
		stream, req.GetTypeUrl(), req.GetVersionInfo(), req.GetResponseNonce(), len(req.GetResourceNames()), requestKind(req.GetResponseNonce(), req.GetErrorDetail() != nil), errText)
}

func (t *tracker) onDeltaRequest(stream int64, req *discoveryv3.DeltaDiscoveryRequest) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.deltaRequests++
	ts := t.countRequest(stream, req.GetTypeUrl(), req.GetResponseNonce(), req.GetErrorDetail() != nil)
	ts.names = len(req.GetResourceNamesSubscribe())
	if n := len(req.GetInitialResourceVersions()); n > 0 {
		ts.initial = n
	}
	errText := ""
	if d := req.GetErrorDetail(); d != nil {
		errText = fmt.Sprintf(" error=%q", d.GetMessage())
		t.println("NACK type=%s version=- nonce=%s error=%q", req.GetTypeUrl(), req.GetResponseNonce(), d.GetMessage())
	}
	fmt.Fprintf(os.Stderr, "DREQ stream=%d type=%s nonce=%q subscribe=%d unsubscribe=%d initial=%d %s%s\n",
		stream, req.GetTypeUrl(), req.GetResponseNonce(), len(req.GetResourceNamesSubscribe()),
		len(req.GetResourceNamesUnsubscribe()), len(req.GetInitialResourceVersions()),
		requestKind(req.GetResponseNonce(), req.GetErrorDetail() != nil), errText)
}

func requestKind(nonce string, nack bool) string {
	switch {
	case nonce == "":
		return "initial"
	case nack:
		return "nack"
	default:
		return "ack"
	}
}

// countRequest counts a request of either variant and matches its nonce to the
// response it answers; the caller holds t.mu.
func (t *tracker) countRequest(stream int64, typeURL, nonce string, nack bool) *typeStats {
	t.requests++
	ts := t.typ(typeURL)
	ts.req++
	if nonce == "" {
		return ts
	}
	if s, ok := t.sent[fmt.Sprintf("%d/%s", stream, nonce)]; ok && s.state == 0 {
		if !nack {
			s.state = 1
			t.acks++
			ts.acks++
			ts.acked = s.version
		} else {
			s.state = 2
			t.nacks++
			ts.nacks++
		}
	} else if nack {
		// A NACK of an unknown or already answered nonce still counts.
		t.nacks++
		ts.nacks++
	}
	return ts
}

func (t *tracker) onResponse(stream int64, resp *discoveryv3.DiscoveryResponse) {
	t.mu.Lock()
	defer t.mu.Unlock()
	ts := t.countResponse(stream, resp.GetTypeUrl(), resp.GetVersionInfo(), resp.GetNonce())
	ts.resources, ts.removed = len(resp.GetResources()), 0
	fmt.Fprintf(os.Stderr, "RESP stream=%d type=%s version=%q nonce=%q resources=%d\n",
		stream, resp.GetTypeUrl(), resp.GetVersionInfo(), resp.GetNonce(), len(resp.GetResources()))
}

func (t *tracker) onDeltaResponse(stream int64, resp *discoveryv3.DeltaDiscoveryResponse) {
	t.mu.Lock()
	defer t.mu.Unlock()
	ts := t.countResponse(stream, resp.GetTypeUrl(), resp.GetSystemVersionInfo(), resp.GetNonce())
	ts.resources, ts.removed = len(resp.GetResources()), len(resp.GetRemovedResources())
	fmt.Fprintf(os.Stderr, "DRESP stream=%d type=%s version=%q nonce=%q resources=%d removed=%d bytes=%d\n",
		stream, resp.GetTypeUrl(), resp.GetSystemVersionInfo(), resp.GetNonce(), len(resp.GetResources()),
		len(resp.GetRemovedResources()), proto.Size(resp))
}

// countResponse counts a response of either variant; the caller holds t.mu.
func (t *tracker) countResponse(stream int64, typeURL, version, nonce string) *typeStats {
	t.responses++
	ts := t.typ(typeURL)
	ts.responses++
	ts.sent = version
	ts.last = fmt.Sprintf("%d/%s", stream, nonce)
	t.sent[ts.last] = &sentResponse{typeURL: typeURL, version: version}
	return ts
}

func (t *tracker) printStats() {
	t.mu.Lock()
	defer t.mu.Unlock()
	unanswered := 0
	for _, s := range t.sent {
		if s.state == 0 {
			unanswered++
		}
	}
	urls := make([]string, 0, len(t.types))
	for u := range t.types {
		urls = append(urls, u)
	}
	sort.Strings(urls)
	for _, u := range urls {
		s := t.types[u]
		settled := true
		if r, ok := t.sent[s.last]; ok && r.state == 0 {
			settled = false
		}
		t.println("TYPE %s sent=%s acked=%s responses=%d acks=%d nacks=%d requests=%d names=%d resources=%d removed=%d initial=%d settled=%t",
			u, orDash(s.sent), orDash(s.acked), s.responses, s.acks, s.nacks, s.req, s.names, s.resources, s.removed, s.initial, settled)
	}
	t.println("STATS version=%d streams=%d requests=%d responses=%d acks=%d nacks=%d unanswered=%d delta_streams=%d delta_requests=%d",
		t.version, t.streams, t.requests, t.responses, t.acks, t.nacks, unanswered, t.deltaStreams, t.deltaRequests)
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// stderrLogger logs go-control-plane's messages on stderr. Messages that list
// every requested name (1,000 clusters) are shortened to their head and tail
// unless verbose.
func stderrLogger(verbose bool) log.Logger {
	logf := func(level string) func(string, ...interface{}) {
		return func(f string, a ...interface{}) {
			msg := fmt.Sprintf(f, a...)
			if !verbose && len(msg) > 400 {
				msg = msg[:200] + fmt.Sprintf(" …(%d bytes)… ", len(msg)-350) + msg[len(msg)-150:]
			}
			fmt.Fprintf(os.Stderr, "%s %s\n", level, msg)
		}
	}
	l := log.LoggerFuncs{WarnFunc: logf("WARN"), ErrorFunc: logf("ERROR")}
	if verbose {
		l.DebugFunc = logf("DEBUG")
		l.InfoFunc = logf("INFO")
	}
	return l
}

func main() {
	cfg := &config{}
	flag.IntVar(&cfg.port, "port", 0, "TCP port on 127.0.0.1 (0: pick a free one; the READY line tells which)")
	flag.StringVar(&cfg.nodeID, "node-id", "xds-proto-interop", "node id the snapshot is set for (must match the client's node.id)")
	flag.IntVar(&cfg.clusters, "clusters", 1000, "number of clusters (at most 2000)")
	flag.IntVar(&cfg.endpoints, "endpoints", 1, "endpoints per cluster (127.0.0.1 .. 127.0.0.K, at most 250)")
	flag.StringVar(&cfg.listenerName, "listener", "interop.example.com", "name of the API listener")
	flag.StringVar(&cfg.routeName, "route", "interop-route", "name of the route configuration")
	flag.BoolVar(&cfg.ads, "ads", true, "snapshot cache in ADS mode: answer a request only once it names every resource of its type in the snapshot; -ads=false answers each request at once with the names it asks for")
	flag.IntVar(&cfg.invalid, "invalid-cluster", -1, "index of a cluster made invalid for gRPC clients (EDS from a file path config source), to provoke a NACK; -1: none")
	flag.BoolVar(&cfg.exitOnEOF, "exit-on-eof", true, "exit when stdin closes")
	flag.BoolVar(&cfg.verbose, "v", false, "log go-control-plane debug messages on stderr")
	flag.Func("split", "also serve listener split.example.com split over clusters split-0, split-1, ... by weight, one endpoint each: WEIGHT:PORT,...", func(s string) error {
		targets, err := parseSplit(s)
		cfg.split = targets
		return err
	})
	flag.Parse()
	if cfg.clusters < 0 || cfg.clusters > 2000 || cfg.endpoints < 1 || cfg.endpoints > 250 {
		fmt.Fprintln(os.Stderr, "go-xds-server: -clusters must be in 0..2000 and -endpoints in 1..250")
		os.Exit(2)
	}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	tr := newTracker()
	cache := cachev3.NewSnapshotCache(cfg.ads, cachev3.IDHash{}, stderrLogger(cfg.verbose))

	// install serialises snapshot changes (stdin and SIGUSR1 may race): it applies
	// `change` to the world and installs the next snapshot version.
	w := newWorld()
	var installMu sync.Mutex
	install := func(change func(*world)) {
		installMu.Lock()
		defer installMu.Unlock()
		w.version++
		change(w)
		snap, err := makeSnapshot(cfg, w)
		if err == nil {
			err = cache.SetSnapshot(ctx, cfg.nodeID, snap)
		}
		if err != nil {
			fmt.Fprintf(os.Stderr, "go-xds-server: snapshot %d: %v\n", w.version, err)
			os.Exit(1)
		}
		tr.mu.Lock()
		tr.version = w.version
		tr.println("UPDATED %d", w.version)
		tr.mu.Unlock()
		fmt.Fprintf(os.Stderr, "SNAPSHOT version=%d node=%s clusters=%d removed=%d\n", w.version, cfg.nodeID, cfg.clusters, len(w.removed))
	}
	newEndpoints := func(w *world) { w.epoch++ }

	// The first snapshot is set before serving, silently: READY means version 1 is there.
	if snap, err := makeSnapshot(cfg, w); err != nil {
		fmt.Fprintf(os.Stderr, "go-xds-server: snapshot 1: %v\n", err)
		os.Exit(1)
	} else if err := cache.SetSnapshot(ctx, cfg.nodeID, snap); err != nil {
		fmt.Fprintf(os.Stderr, "go-xds-server: set snapshot 1: %v\n", err)
		os.Exit(1)
	}
	tr.version = 1

	callbacks := serverv3.CallbackFuncs{
		StreamOpenFunc: func(_ context.Context, id int64, typ string) error {
			tr.mu.Lock()
			tr.streams++
			tr.mu.Unlock()
			fmt.Fprintf(os.Stderr, "OPEN stream=%d type=%q\n", id, typ)
			return nil
		},
		StreamClosedFunc: func(id int64, node *corev3.Node) {
			fmt.Fprintf(os.Stderr, "CLOSE stream=%d node=%q\n", id, node.GetId())
		},
		StreamRequestFunc: func(id int64, req *discoveryv3.DiscoveryRequest) error {
			tr.onRequest(id, req)
			return nil
		},
		StreamResponseFunc: func(_ context.Context, id int64, _ *discoveryv3.DiscoveryRequest, resp *discoveryv3.DiscoveryResponse) {
			tr.onResponse(id, resp)
		},
		DeltaStreamOpenFunc: func(_ context.Context, id int64, typ string) error {
			tr.mu.Lock()
			tr.streams++
			tr.deltaStreams++
			tr.mu.Unlock()
			fmt.Fprintf(os.Stderr, "OPEN delta stream=%d type=%q\n", id, typ)
			return nil
		},
		DeltaStreamClosedFunc: func(id int64, node *corev3.Node) {
			fmt.Fprintf(os.Stderr, "CLOSE delta stream=%d node=%q\n", id, node.GetId())
		},
		StreamDeltaRequestFunc: func(id int64, req *discoveryv3.DeltaDiscoveryRequest) error {
			tr.onDeltaRequest(id, req)
			return nil
		},
		StreamDeltaResponseFunc: func(id int64, _ *discoveryv3.DeltaDiscoveryRequest, resp *discoveryv3.DeltaDiscoveryResponse) {
			tr.onDeltaResponse(id, resp)
		},
	}
	xds := serverv3.NewServer(ctx, cache, callbacks)

	// serve starts a gRPC server on `addr`; "restart" stops it and serves again.
	var serverMu sync.Mutex
	var grpcServer *grpc.Server
	serve := func(addr string) *net.TCPAddr {
		lis, err := net.Listen("tcp", addr)
		if err != nil {
			fmt.Fprintf(os.Stderr, "go-xds-server: listen: %v\n", err)
			os.Exit(1)
		}
		s := grpc.NewServer(
			grpc.MaxConcurrentStreams(1000),
			grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 5 * time.Second, PermitWithoutStream: true}),
		)
		discoveryv3.RegisterAggregatedDiscoveryServiceServer(s, xds)
		go func() {
			// Serve returns nil once stopped.
			if err := s.Serve(lis); err != nil {
				fmt.Fprintf(os.Stderr, "go-xds-server: serve: %v\n", err)
				os.Exit(1)
			}
		}()
		grpcServer = s
		return lis.Addr().(*net.TCPAddr)
	}
	stop := func() {
		serverMu.Lock()
		defer serverMu.Unlock()
		grpcServer.Stop()
	}
	bound := serve(net.JoinHostPort("127.0.0.1", strconv.Itoa(cfg.port)))
	restart := func() {
		serverMu.Lock()
		defer serverMu.Unlock()
		grpcServer.Stop()
		serve(bound.String())
		tr.mu.Lock()
		tr.println("RESTARTED %d", bound.Port)
		tr.mu.Unlock()
	}

	tr.mu.Lock()
	tr.println("READY %d", bound.Port)
	tr.mu.Unlock()
	fmt.Fprintf(os.Stderr, "SNAPSHOT version=1 node=%s clusters=%d\n", cfg.nodeID, cfg.clusters)

	usr1 := make(chan os.Signal, 1)
	signal.Notify(usr1, syscall.SIGUSR1)
	term := make(chan os.Signal, 1)
	signal.Notify(term, syscall.SIGINT, syscall.SIGTERM)
	done := make(chan struct{})

	go func() {
		scanner := bufio.NewScanner(os.Stdin)
		for scanner.Scan() {
			words := strings.Fields(scanner.Text())
			if len(words) == 0 {
				continue
			}
			index := -1
			if len(words) == 2 {
				if i, err := strconv.Atoi(words[1]); err == nil && i >= 0 && i < cfg.clusters {
					index = i
				}
			}
			switch cmd := words[0]; {
			case cmd == "update" && len(words) == 1:
				install(newEndpoints)
			case cmd == "touch-cluster" && index >= 0:
				install(func(w *world) { w.touches[index]++ })
			case cmd == "remove-cluster" && index >= 0:
				install(func(w *world) { w.removed[index] = true })
			case cmd == "restart" && len(words) == 1:
				restart()
			case cmd == "stats" && len(words) == 1:
				tr.printStats()
			case cmd == "quit" && len(words) == 1:
				close(done)
				return
			default:
				fmt.Fprintf(os.Stderr, "go-xds-server: unknown command %q (update|touch-cluster i|remove-cluster i|restart|stats|quit)\n", scanner.Text())
			}
		}
		if cfg.exitOnEOF {
			close(done)
		}
	}()

	for {
		select {
		case <-usr1:
			install(newEndpoints)
		case <-term:
			stop()
			return
		case <-done:
			stop()
			return
		}
	}
}
