package main

// The server subcommand: an xDS-enabled gRPC server (gRFC A36) with xDS
// server credentials (A29, plaintext fallback) serving the echo service on
// 127.0.0.1, optionally with ORCA load reports (A51), and a plain maintenance
// server beside it (CSDS and channelz through admin, and health).
//
// Its stdout, one line per event, for the test that runs it:
//
//	LISTENING 127.0.0.1:PORT      the echo listener is bound (before any xDS)
//	MAINTENANCE 127.0.0.1:PORT    the maintenance server is bound
//	SERVING 127.0.0.1:PORT        the xDS listener resource arrived: RPCs are served
//	NOT_SERVING 127.0.0.1:PORT ERROR
//
// It stops when its stdin closes.

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/admin"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/credentials/insecure"
	xdscreds "google.golang.org/grpc/credentials/xds"
	"google.golang.org/grpc/health"
	healthgrpc "google.golang.org/grpc/health/grpc_health_v1"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/orca"
	"google.golang.org/grpc/xds"
)

// stdoutMu keeps event lines whole: the serving-mode callback runs on gRPC's goroutines.
var stdoutMu sync.Mutex

func event(format string, args ...any) {
	stdoutMu.Lock()
	defer stdoutMu.Unlock()
	fmt.Printf(format+"\n", args...)
}

func runServer(args []string) error {
	fs := flag.NewFlagSet("server", flag.ExitOnError)
	name := fs.String("name", "grpc-go", "the backend name every echo reply carries")
	port := fs.Int("port", 0, "the echo service's port on 127.0.0.1 (0: a free one)")
	maintenancePort := fs.Int("maintenance-port", -1,
		"port on 127.0.0.1 for CSDS, channelz and health (0: a free one, -1: none)")
	withOrca := fs.Bool("orca", false,
		"attach an ORCA load report to every echo reply's trailers and serve the OOB OpenRcaService; "+
			"the report holds the metrics given below (only those given)")
	fs.Float64("cpu-utilization", 0, "ORCA cpu_utilization")
	fs.Float64("application-utilization", 0, "ORCA application_utilization")
	fs.Float64("qps", 0, "ORCA rps_fractional (queries per second)")
	fs.Float64("eps", 0, "ORCA eps (errors per second)")
	fs.Parse(args)

	creds, err := xdscreds.NewServerCredentials(xdscreds.ServerOptions{FallbackCreds: insecure.NewCredentials()})
	if err != nil {
		return err
	}
	healthServer := health.NewServer()
	healthServer.SetServingStatus("", healthpb.HealthCheckResponse_NOT_SERVING)
	opts := []grpc.ServerOption{
		grpc.Creds(creds),
		grpc.ForceServerCodecV2(newEchoCodec()),
		xds.ServingModeCallback(func(addr net.Addr, args xds.ServingModeChangeArgs) {
			if args.Mode == connectivity.ServingModeServing {
				healthServer.SetServingStatus("", healthpb.HealthCheckResponse_SERVING)
				event("SERVING %s", addr)
			} else {
				healthServer.SetServingStatus("", healthpb.HealthCheckResponse_NOT_SERVING)
				event("NOT_SERVING %s %v", addr, args.Err)
			}
		}),
	}
	var metrics orca.ServerMetricsRecorder
	if *withOrca {
		metrics = orcaMetrics(fs)
		opts = append(opts, orca.CallMetricsServerOption(metrics))
	}
	server, err := xds.NewGRPCServer(opts...)
	if err != nil {
		return fmt.Errorf("xds.NewGRPCServer (is GRPC_XDS_BOOTSTRAP set?): %w", err)
	}
	server.RegisterService(echoServiceDesc(), echo(*name, *withOrca))
	if metrics != nil {
		if err := orca.Register(server, orca.ServiceOptions{ServerMetricsProvider: metrics}); err != nil {
			return err
		}
	}

	lis, err := net.Listen("tcp4", fmt.Sprintf("127.0.0.1:%d", *port))
	if err != nil {
		return err
	}
	if *maintenancePort >= 0 {
		stop, err := serveMaintenance(*maintenancePort, healthServer)
		if err != nil {
			return err
		}
		defer stop()
	}
	event("LISTENING %s", lis.Addr())
	go func() {
		io.Copy(io.Discard, os.Stdin)
		server.Stop()
	}()
	if err := server.Serve(lis); err != nil && err != grpc.ErrServerStopped {
		return err
	}
	return nil
}

// echo answers with the request's message and this backend's name, after the
// delay the request asks for.
func echo(name string, withOrca bool) echoHandler {
	return func(ctx context.Context, req *echoRequest) (*echoReply, error) {
		if withOrca {
			// The per-call report goes out only for calls that asked for the
			// recorder; it carries the server's metrics (set from the flags).
			orca.CallMetricsRecorderFromContext(ctx)
		}
		if req.delayMs > 0 {
			select {
			case <-time.After(time.Duration(req.delayMs) * time.Millisecond):
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}
		return &echoReply{message: req.message, backend: name}, nil
	}
}

// orcaMetrics holds the ORCA metrics given on the command line.
func orcaMetrics(fs *flag.FlagSet) orca.ServerMetricsRecorder {
	metrics := orca.NewServerMetricsRecorder()
	setters := map[string]func(float64){
		"cpu-utilization":         metrics.SetCPUUtilization,
		"application-utilization": metrics.SetApplicationUtilization,
		"qps":                     metrics.SetQPS,
		"eps":                     metrics.SetEPS,
	}
	fs.Visit(func(f *flag.Flag) {
		if set, ok := setters[f.Name]; ok {
			set(f.Value.(flag.Getter).Get().(float64))
		}
	})
	return metrics
}

// serveMaintenance serves CSDS, channelz (admin) and health in plaintext.
func serveMaintenance(port int, healthServer *health.Server) (stop func(), _ error) {
	lis, err := net.Listen("tcp4", fmt.Sprintf("127.0.0.1:%d", port))
	if err != nil {
		return nil, err
	}
	server := grpc.NewServer()
	healthgrpc.RegisterHealthServer(server, healthServer)
	cleanup, err := admin.Register(server)
	if err != nil {
		lis.Close()
		return nil, err
	}
	go server.Serve(lis)
	event("MAINTENANCE %s", lis.Addr())
	return func() {
		server.Stop()
		cleanup()
	}, nil
}
