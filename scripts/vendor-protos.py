#!/usr/bin/env python3
"""Copy the Envoy/xDS .proto files the core compiles, with their import closure,
from the envoy-types crate in the local cargo registry into xds-proto-core/proto.

The core's build script compiles these with protox, so a build needs neither
protoc nor network. Re-run after bumping envoy-types:
    cargo fetch && python3 scripts/vendor-protos.py
"""
import glob, os, re, shutil, sys

ENVOY_TYPES_VERSION = "0.7.7"
ROOTS = [
    "envoy/service/discovery/v3/discovery.proto",
    "envoy/service/status/v3/csds.proto",
    "envoy/config/listener/v3/listener.proto",
    "envoy/extensions/filters/network/http_connection_manager/v3/http_connection_manager.proto",
    "envoy/extensions/filters/http/router/v3/router.proto",
    "envoy/config/route/v3/route.proto",
    "envoy/config/cluster/v3/cluster.proto",
    "envoy/config/endpoint/v3/endpoint.proto",
    "envoy/extensions/clusters/aggregate/v3/cluster.proto",
    "envoy/extensions/transport_sockets/tls/v3/tls.proto",
    "envoy/extensions/load_balancing_policies/round_robin/v3/round_robin.proto",
    "envoy/extensions/load_balancing_policies/ring_hash/v3/ring_hash.proto",
    "envoy/extensions/load_balancing_policies/least_request/v3/least_request.proto",
    "envoy/extensions/load_balancing_policies/wrr_locality/v3/wrr_locality.proto",
    "envoy/extensions/load_balancing_policies/client_side_weighted_round_robin/v3/client_side_weighted_round_robin.proto",
    "envoy/extensions/load_balancing_policies/pick_first/v3/pick_first.proto",
    "google/rpc/status.proto",
]

def main():
    home = os.environ.get("CARGO_HOME", os.path.expanduser("~/.cargo"))
    hits = glob.glob(f"{home}/registry/src/*/envoy-types-{ENVOY_TYPES_VERSION}/proto")
    if not hits:
        sys.exit(f"envoy-types {ENVOY_TYPES_VERSION} not in the cargo registry: run `cargo fetch` first")
    src = hits[0]
    include_dirs = [os.path.join(src, d) for d in sorted(os.listdir(src))]
    include_dirs += [os.path.join(src, "cel-spec", "proto")]
    def locate(rel):
        for d in include_dirs:
            p = os.path.join(d, rel)
            if os.path.isfile(p):
                return p
        return None
    dest = os.path.join(os.path.dirname(__file__), "..", "xds-proto-core", "proto")
    shutil.rmtree(dest, ignore_errors=True)
    seen, todo = set(), list(ROOTS)
    while todo:
        rel = todo.pop()
        if rel in seen or rel.startswith("google/protobuf/"):
            continue  # protox ships the well-known types
        seen.add(rel)
        path = locate(rel)
        if path is None:
            sys.exit(f"import not found: {rel}")
        text = open(path).read()
        out = os.path.join(dest, rel)
        os.makedirs(os.path.dirname(out), exist_ok=True)
        with open(out, "w") as f:
            f.write(text)
        todo += re.findall(r'^import\s+(?:public\s+)?"([^"]+)";', text, re.M)
    print(f"vendored {len(seen)} files into {os.path.normpath(dest)}")

main()
