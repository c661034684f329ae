package main

// The client subcommand: gRPC-Go's xDS client (the xds:/// resolver and the
// balancers the control plane configures) sending echo RPCs, with xDS
// credentials (A29, plaintext fallback) or plaintext. It prints one JSON
// line, what Rust tests compare XdsChannel against:
//
//	{"rpcs":100,"elapsed_ms":812.5,"first_success_ms":95.1,
//	 "backends":{"go-0":50,"go-1":50},
//	 "statuses":{"0":{"name":"OK","count":100,"first_message":""}}}
//
// backends counts the successful replies by the backend name they carry;
// statuses counts every RPC by its status code (as a decimal string), with the
// message of the first RPC that ended with it; first_success_ms is the time
// from the client's start (before the xDS resolution) to the first successful
// reply, null when none succeeded. When backends attach ORCA per-call load
// reports (A51: the endpoint-load-metrics-bin trailer), "orca" holds the last
// one each backend sent, in proto JSON with the proto field names:
//
//	"orca":{"go-0":{"cpu_utilization":0.25,"rps_fractional":40}}

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	xdscreds "google.golang.org/grpc/credentials/xds"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	orcapb "github.com/cncf/xds/go/xds/data/orca/v3"
	_ "google.golang.org/grpc/xds" // the xds:/// resolver and the xDS balancers
)

type statusCount struct {
	Name         string `json:"name"`
	Count        int    `json:"count"`
	FirstMessage string `json:"first_message"`
}

type results struct {
	RPCs           int                        `json:"rpcs"`
	ElapsedMs      float64                    `json:"elapsed_ms"`
	FirstSuccessMs *float64                   `json:"first_success_ms"`
	Backends       map[string]int             `json:"backends"`
	Statuses       map[string]*statusCount    `json:"statuses"`
	Orca           map[string]json.RawMessage `json:"orca,omitempty"`
}

// tally collects the RPCs' outcomes from the client's goroutines.
type tally struct {
	mu    sync.Mutex
	start time.Time
	r     results
}

func (t *tally) record(reply *echoReply, trailer metadata.MD, err error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.r.RPCs++
	st := status.Convert(err)
	if err == nil {
		t.r.Backends[reply.backend]++
		if report := orcaReport(trailer); report != nil {
			t.r.Orca[reply.backend] = report
		}
		if t.r.FirstSuccessMs == nil {
			ms := millis(time.Since(t.start))
			t.r.FirstSuccessMs = &ms
		}
	}
	key := strconv.Itoa(int(st.Code()))
	c, ok := t.r.Statuses[key]
	if !ok {
		c = &statusCount{Name: st.Code().String(), FirstMessage: st.Message()}
		t.r.Statuses[key] = c
	}
	c.Count++
}

// orcaReport is the trailer's ORCA load report as proto JSON, or nil when it has
// none (or one that does not decode).
func orcaReport(trailer metadata.MD) json.RawMessage {
	values := trailer.Get("endpoint-load-metrics-bin")
	if len(values) == 0 {
		return nil
	}
	report := new(orcapb.OrcaLoadReport)
	if err := proto.Unmarshal([]byte(values[len(values)-1]), report); err != nil {
		return nil
	}
	b, err := protojson.MarshalOptions{UseProtoNames: true}.Marshal(report)
	if err != nil {
		return nil
	}
	return b
}

func millis(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// headerFlags is a repeatable -header key=value flag.
type headerFlags []string

func (h *headerFlags) String() string { return strings.Join(*h, ",") }

func (h *headerFlags) Set(v string) error {
	key, value, ok := strings.Cut(v, "=")
	if !ok || key == "" {
		return fmt.Errorf("want key=value, got %q", v)
	}
	*h = append(*h, strings.ToLower(key), value)
	return nil
}

func runClient(args []string) error {
	fs := flag.NewFlagSet("client", flag.ExitOnError)
	target := fs.String("target", "", "the channel's target, e.g. xds:///echo.example.com (required)")
	rpcs := fs.Int("rpcs", 100, "how many echo RPCs to send")
	concurrency := fs.Int("concurrency", 1, "RPCs in flight at once, at most")
	rate := fs.Float64("rate", 0, "RPCs started per second, overall (0: as fast as -concurrency allows)")
	timeout := fs.Duration("timeout", 10*time.Second, "each RPC's deadline")
	waitForReady := fs.Bool("wait-for-ready", false, "send the RPCs with wait-for-ready")
	useXdsCreds := fs.Bool("xds-creds", false,
		"use XdsCredentials (security from CDS, plaintext fallback) instead of plaintext")
	message := fs.String("message", "grpc-go", "the echo requests' message")
	var headers headerFlags
	fs.Var(&headers, "header", "key=value metadata on every RPC (repeatable)")
	fs.Parse(args)
	if *target == "" || *rpcs < 0 || *concurrency < 1 || *rate < 0 {
		fs.Usage()
		os.Exit(2)
	}

	t := &tally{start: time.Now(), r: results{Backends: map[string]int{}, Statuses: map[string]*statusCount{}, Orca: map[string]json.RawMessage{}}}
	var creds credentials.TransportCredentials = insecure.NewCredentials()
	if *useXdsCreds {
		var err error
		creds, err = xdscreds.NewClientCredentials(xdscreds.ClientOptions{FallbackCreds: insecure.NewCredentials()})
		if err != nil {
			return err
		}
	}
	conn, err := grpc.NewClient(*target, grpc.WithTransportCredentials(creds))
	if err != nil {
		return fmt.Errorf("grpc.NewClient(%q) (is GRPC_XDS_BOOTSTRAP set?): %w", *target, err)
	}
	defer conn.Close()

	call := func() {
		ctx, cancel := context.WithTimeout(context.Background(), *timeout)
		defer cancel()
		if len(headers) > 0 {
			ctx = metadata.AppendToOutgoingContext(ctx, headers...)
		}
		reply := new(echoReply)
		var trailer metadata.MD
		err := conn.Invoke(ctx, echoMethod, &echoRequest{message: *message}, reply,
			grpc.ForceCodecV2(newEchoCodec()), grpc.WaitForReady(*waitForReady), grpc.Trailer(&trailer))
		t.record(reply, trailer, err)
	}
	run(*rpcs, *concurrency, *rate, call)

	t.r.ElapsedMs = millis(time.Since(t.start))
	return json.NewEncoder(os.Stdout).Encode(&t.r)
}

// run makes n calls on `concurrency` goroutines, started at `rate` per second
// overall when rate > 0.
func run(n, concurrency int, rate float64, call func()) {
	starts := make(chan struct{})
	var wg sync.WaitGroup
	for range concurrency {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range starts {
				call()
			}
		}()
	}
	var tick <-chan time.Time
	if rate > 0 {
		ticker := time.NewTicker(time.Duration(float64(time.Second) / rate))
		defer ticker.Stop()
		tick = ticker.C
	}
	for i := range n {
		if tick != nil && i > 0 {
			<-tick
		}
		starts <- struct{}{}
	}
	close(starts)
	wg.Wait()
}
