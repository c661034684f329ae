// Command grpc-go-peer is xds-proto's gRPC-Go interop peer: gRPC-Go's own xDS
// server and xDS client around the project's echo service
// (xds-test-server/src/echo.rs), for Rust tests to run beside XdsChannel and
// the project's servers on the same control plane.
//
//	grpc-go-peer server -name NAME [-port P] [-maintenance-port M] [-orca ...]
//	grpc-go-peer client -target xds:///NAME [-rpcs N] [-concurrency C] [-rate R] [-xds-creds]
//
// Both read their xDS bootstrap from GRPC_XDS_BOOTSTRAP or
// GRPC_XDS_BOOTSTRAP_CONFIG, which gRPC-Go reads when the process starts: the
// caller sets them. A server's Listener resource is named by the bootstrap's
// server_listener_resource_name_template with %s replaced by 127.0.0.1:PORT.
//
// The server prints one line per event on stdout (see server.go) and stops
// when its stdin closes; the client prints one JSON line of results (see
// client.go). Errors go to stderr, with exit status 1 (2 for bad usage).
package main

import (
	"fmt"
	"os"
)

const usage = `usage: grpc-go-peer server|client [flags]   (-h after the subcommand lists its flags)`

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, usage)
		os.Exit(2)
	}
	var err error
	switch os.Args[1] {
	case "server":
		err = runServer(os.Args[2:])
	case "client":
		err = runClient(os.Args[2:])
	default:
		fmt.Fprintln(os.Stderr, usage)
		os.Exit(2)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "grpc-go-peer %s: %v\n", os.Args[1], err)
		os.Exit(1)
	}
}
