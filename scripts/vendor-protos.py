#!/usr/bin/env python3
"""Copy the Envoy/xDS .proto files the core compiles, with their import closure,
from the envoy-types crate in the local cargo registry into xds-proto-core/proto.

envoy-types does not package the CNCF xds repository's ORCA protos
(xds/data/orca/v3, xds/service/orca/v3, gRFC A51); those come from Debian's
golang-github-cncf-xds-dev, which the interop build unpacks
(interop/go-control-plane/build.sh), or from any cncf/xds checkout named by
XDS_CNCF_PROTO_DIR. envoy-types is searched first, so only what it lacks is
taken from there.

The core's build script compiles these with protox, so a build needs neither
protoc nor network. Re-run after bumping envoy-types:
    cargo fetch && bash interop/go-control-plane/build.sh && python3 scripts/vendor-protos.py
"""
import glob, os, re, shutil, sys

ENVOY_TYPES_VERSION = "0.7.7"
def read_roots(path):
    with open(path) as f:
        return [l.strip() for l in f if l.strip() and not l.lstrip().startswith("#")]

def main():
    home = os.environ.get("CARGO_HOME", os.path.expanduser("~/.cargo"))
    hits = glob.glob(f"{home}/registry/src/*/envoy-types-{ENVOY_TYPES_VERSION}/proto")
    if not hits:
        sys.exit(f"envoy-types {ENVOY_TYPES_VERSION} not in the cargo registry: run `cargo fetch` first")
    src = hits[0]
    include_dirs = [os.path.join(src, d) for d in sorted(os.listdir(src))]
    include_dirs += [os.path.join(src, "cel-spec", "proto")]
    repo = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
    interop_out = os.environ.get("XDS_INTEROP_OUT", os.path.join(repo, "target", "interop"))
    cncf = os.environ.get("XDS_CNCF_PROTO_DIR", os.path.join(
        interop_out, "go-control-plane", "root", "usr", "share", "gocode", "src",
        "github.com", "cncf", "xds"))
    include_dirs.append(cncf)
    def locate(rel):
        for d in include_dirs:
            p = os.path.join(d, rel)
            if os.path.isfile(p):
                return p
        return None
    dest = os.path.join(os.path.dirname(__file__), "..", "xds-proto-core", "proto")
    roots = read_roots(os.path.join(dest, "ROOTS"))
    keep = {name: open(os.path.join(dest, name)).read() for name in ("ROOTS", "README.md")}
    shutil.rmtree(dest, ignore_errors=True)
    os.makedirs(dest)
    for name, text in keep.items():
        with open(os.path.join(dest, name), "w") as f:
            f.write(text)
    seen, todo = set(), list(roots)
    while todo:
        rel = todo.pop()
        if rel in seen or rel.startswith("google/protobuf/"):
            continue  # protox ships the well-known types
        seen.add(rel)
        path = locate(rel)
        if path is None:
            hint = " (the ORCA protos: run interop/go-control-plane/build.sh or set XDS_CNCF_PROTO_DIR)" if "orca" in rel else ""
            sys.exit(f"import not found: {rel}{hint}")
        text = open(path).read()
        out = os.path.join(dest, rel)
        os.makedirs(os.path.dirname(out), exist_ok=True)
        with open(out, "w") as f:
            f.write(text)
        todo += re.findall(r'^import\s+(?:public\s+)?"([^"]+)";', text, re.M)
    print(f"vendored {len(seen)} files into {os.path.normpath(dest)}")

main()
