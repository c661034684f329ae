#!/usr/bin/env bash
# Builds the gRPC-Go interop peer (peer/ beside this script) into
# target/interop/grpc-go-peer; `build.sh xds-interop` builds gRPC-Go's own xDS
# interop test client and server instead (google.golang.org/grpc/interop/xds/client
# and .../server, as gRPC's test descriptions define them) into
# target/interop/grpc-go-xds-interop-client and -server.
#
# gRPC-Go comes from Debian, like go-control-plane in ../go-control-plane/build.sh,
# whose private root this build shares: that script unpacks Go 1.27 and the
# thirteen packages a go-control-plane server needs (golang-google-grpc-dev among
# them) into target/interop/go-control-plane/root; this one runs it first, then
# adds the few packages gRPC-Go's xDS client, server and credentials import on
# top (listed below) into a root of its own, target/interop/grpc-go/root, and
# builds offline in GOPATH mode with both roots on GOPATH and the same Go build
# cache. Nothing is installed on the system; the only network access is to the
# Debian archive, and only on a cold run.
#
# The suite is the one go-control-plane's build uses (trixie-backports by
# default), so that one Go toolchain and one copy of grpc, protobuf, genproto
# and the envoy protos serve both programs. trixie-backports has gRPC-Go 1.79.3
# (forky and sid have 1.81.1): xds.NewGRPCServer, credentials/xds, the
# file_watcher certificate provider, orca and weighted_round_robin are all in
# it. XDS_INTEROP_SUITE=sid switches both builds to sid.
#
# Idempotent: a warm run (packages unpacked, binary built from the same sources)
# checks two stamps and exits in well under a second. Safe to run concurrently
# (flock; the go-control-plane root is held with a shared lock while building
# against it, so that its script cannot replace it mid-build).
#
# Environment: the same as ../go-control-plane/build.sh
#   XDS_INTEROP_OUT      output directory (default: <repo>/target/interop)
#   XDS_INTEROP_MIRROR   Debian mirror (default: http://deb.debian.org/debian)
#   XDS_INTEROP_SUITE    trixie-backports (default) or sid
#   XDS_INTEROP_GO       Go toolchain package (default: golang-1.27-go)
# Prints the binary's path as its last line (the two paths, for xds-interop).
set -euo pipefail

what=${1:-peer}
case "$what" in
peer | xds-interop) ;;
*) echo "usage: build.sh [peer|xds-interop]" >&2; exit 2 ;;
esac

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)
out=${XDS_INTEROP_OUT:-$repo/target/interop}
mirror=${XDS_INTEROP_MIRROR:-http://deb.debian.org/debian}
suite=${XDS_INTEROP_SUITE:-trixie-backports}
go_pkg=${XDS_INTEROP_GO:-golang-1.27-go}
go_ver=${go_pkg#golang-}
go_ver=${go_ver%-go}

base_work=$out/go-control-plane # Go, grpc and the envoy protos (../go-control-plane/build.sh)
base_root=$base_work/root
work=$out/grpc-go               # apt state and the extra packages
root=$work/root
bin=$out/grpc-go-peer

# What the peer imports beyond the go-control-plane root, package by package
# (checked with `go list -deps`). If a newer Debian version grows an import
# outside both lists, the build falls back once to gRPC-Go's whole Debian
# dependency closure.
packages=(
	golang-github-cespare-xxhash-dev
	golang-github-spiffe-go-spiffe-dev
	golang-github-go-jose-go-jose-dev
	golang-golang-x-oauth2-dev
	golang-golang-x-oauth2-google-dev
	golang-google-cloud-compute-metadata-dev
	golang-golang-x-sync-dev
	golang-github-zeebo-errs-dev
)

# What gRPC-Go's xDS interop client and server import on top: their metrics
# (OpenTelemetry with its Prometheus exporter, for CSM observability). Debian does
# not package OpenTelemetry's GCP resource detector, which the CSM plugin imports:
# xds-interop/stub stands in for it (it detects nothing, as the real one does off
# Google Cloud).
xds_interop_packages=(
	golang-opentelemetry-otel-dev
	golang-opentelemetry-contrib-dev
	golang-github-prometheus-client-golang-dev
	golang-github-prometheus-client-model-dev
	golang-github-prometheus-common-dev
	golang-github-prometheus-procfs-dev
	golang-github-beorn7-perks-dev
	golang-github-klauspost-compress-dev
	golang-github-go-logr-logr-dev
	golang-github-go-logr-stdr-dev
	golang-github-google-uuid-dev
	golang-github-munnerz-goautoneg-dev
)
xds_root=$work/root-xds-interop
xds_bin=$out/grpc-go-xds-interop

log() { printf 'interop/grpc-go/build.sh: %s\n' "$*" >&2; }

# Go and the shared packages first (a no-op when they are there).
bash "$here/../go-control-plane/build.sh" >/dev/null

mkdir -p "$work"
exec 9>"$work/.lock"
flock 9
# Keeps go-control-plane's build.sh from replacing its root while this one reads it.
exec 8>>"$base_work/.lock"
flock -s 8

case "$suite" in
sid | unstable) suites="sid" ;;
*-backports) suites="${suite%-backports} $suite" ;;
*) suites="$suite" ;;
esac

# ---- private apt (as in ../go-control-plane/build.sh, with its own state) ----
apt_dir=$work/apt
apt_opts=(
	-c "$apt_dir/apt.conf"
	-o "Dir::Etc::SourceList=/dev/null"
	-o "Dir::Etc::SourceParts=$apt_dir/sources.list.d"
	-o "Dir::Etc::Preferences=/dev/null"
	-o "Dir::Etc::PreferencesParts=$apt_dir/preferences.d"
	-o "Dir::State=$apt_dir/state"
	-o "Dir::State::status=$apt_dir/state/status"
	-o "Dir::Cache=$apt_dir/cache"
	-o "Debug::NoLocking=true"
	-o "Acquire::Retries=3"
)
if [ "$(id -u)" = 0 ]; then
	apt_opts+=(-o "APT::Sandbox::User=root")
fi

apt_setup() {
	mkdir -p "$apt_dir/sources.list.d" "$apt_dir/preferences.d" \
		"$apt_dir/state/lists/partial" "$apt_dir/cache/archives/partial"
	: >"$apt_dir/state/status"
	cat >"$apt_dir/apt.conf" <<EOF
#clear APT::Update::Pre-Invoke;
#clear APT::Update::Post-Invoke;
#clear APT::Update::Post-Invoke-Success;
#clear DPkg::Pre-Invoke;
#clear DPkg::Post-Invoke;
#clear DPkg::Pre-Install-Pkgs;
EOF
	cat >"$apt_dir/sources.list.d/interop.sources" <<EOF
Types: deb
URIs: $mirror
Suites: $suites
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
Architectures: amd64
Targets: Packages
EOF
	log "apt-get update ($suites from $mirror, private lists)"
	apt-get "${apt_opts[@]}" -qq --error-on=any update >&2
}

# Downloads the named packages' .debs from $suite and unpacks them into $1.
fetch_into() {
	local dest=$1
	shift
	local debs=$work/debs
	rm -rf "$debs"
	mkdir -p "$debs" "$dest"
	log "downloading $# packages from $suite"
	(cd "$debs" && apt-get "${apt_opts[@]}" -qq -t "$suite" download "$@" >&2)
	local d
	for d in "$debs"/*.deb; do
		dpkg-deb -x "$d" "$dest"
	done
	rm -rf "$debs"
}

# Every golang-* package in the Depends closure of gRPC-Go and Go.
full_closure() {
	apt-get "${apt_opts[@]}" -s -t "$suite" --no-install-recommends install \
		golang-google-grpc-dev "$go_pkg" 2>/dev/null |
		awk '/^Inst golang-/ {print $2}'
}

# The base root's stamp is part of the fingerprint: a suite change there is one here.
fingerprint="$(cat "$base_work/root.stamp") extra=${packages[*]}"
if [ ! -f "$work/root.stamp" ] || [ "$(cat "$work/root.stamp")" != "$fingerprint" ]; then
	start=$SECONDS
	rm -f "$work/root.stamp" "$work/full.stamp" "$bin.stamp"
	apt_setup
	rm -rf "$root.tmp"
	fetch_into "$root.tmp" "${packages[@]}"
	rm -rf "$root"
	mv "$root.tmp" "$root"
	printf '%s' "$fingerprint" >"$work/root.stamp"
	log "unpacked into $root in $((SECONDS - start))s"
fi

if [ "$what" = xds-interop ]; then
	xds_fingerprint="$fingerprint xds=${xds_interop_packages[*]}"
	if [ ! -f "$xds_root.stamp" ] || [ "$(cat "$xds_root.stamp")" != "$xds_fingerprint" ]; then
		start=$SECONDS
		rm -f "$xds_root.stamp" "$xds_bin.stamp"
		apt_setup
		rm -rf "$xds_root.tmp"
		fetch_into "$xds_root.tmp" "${xds_interop_packages[@]}"
		rm -rf "$xds_root"
		mv "$xds_root.tmp" "$xds_root"
		printf '%s' "$xds_fingerprint" >"$xds_root.stamp"
		log "unpacked the xDS interop binaries' packages into $xds_root in $((SECONDS - start))s"
	fi
fi

goroot=$base_root/usr/lib/go-$go_ver
go=$goroot/bin/go
export GO111MODULE=off GOPATH=$base_root/usr/share/gocode:$root/usr/share/gocode GOROOT=$goroot
export GOCACHE=$base_work/gocache GOTOOLCHAIN=local GOPROXY=off GOFLAGS= GOENV=off CGO_ENABLED=0
export GOTELEMETRY=off

if [ "$what" = xds-interop ]; then
	export GOPATH=$GOPATH:$xds_root/usr/share/gocode:$here/xds-interop/stub
	xds_sum=$( (echo loopback-overlay; cat "$xds_root.stamp" "$here"/xds-interop/stub/src/go.opentelemetry.io/contrib/detectors/gcp/*.go; "$go" version) |
		sha256sum | cut -d' ' -f1)
	if [ -x "$xds_bin-client" ] && [ -x "$xds_bin-server" ] && [ -f "$xds_bin.stamp" ] &&
		[ "$(cat "$xds_bin.stamp")" = "$xds_sum" ]; then
		log "up to date"
		printf '%s\n' "$xds_bin-client" "$xds_bin-server"
		exit 0
	fi
	start=$SECONDS
	log "building gRPC-Go's xDS interop client and server with $("$go" version)"
	# They listen on every address (":%d"); the project's tests bind 127.0.0.1 only, so
	# a build overlay (go build -overlay: the sources stay as Debian ships them) gives
	# each listen address the loopback host. The count of rewritten addresses is checked,
	# so a gRPC-Go that listens some other way fails here rather than binding wide.
	overlay=$work/overlay
	rm -rf "$overlay"
	mkdir -p "$overlay"
	pkg_dir=$base_root/usr/share/gocode/src/google.golang.org/grpc/interop/xds
	replace=()
	for side in client server; do
		src=$pkg_dir/$side/$side.go
		sed 's/fmt\.Sprintf(":%d"/fmt.Sprintf("127.0.0.1:%d"/g' "$src" >"$overlay/$side.go"
		want=$(grep -c 'net.Listen("tcp' "$src")
		got=$(grep -c 'fmt.Sprintf("127.0.0.1:%d"' "$overlay/$side.go")
		if [ "$got" != "$want" ]; then
			log "$src: $want listen calls but $got loopback addresses after the rewrite"
			exit 1
		fi
		replace+=("\"$src\": \"$overlay/$side.go\"")
	done
	(IFS=,; printf '{"Replace": {%s}}' "${replace[*]}") >"$overlay/overlay.json"
	for side in client server; do
		"$go" build -trimpath -overlay "$overlay/overlay.json" -o "$xds_bin-$side.tmp" \
			"google.golang.org/grpc/interop/xds/$side"
		mv "$xds_bin-$side.tmp" "$xds_bin-$side"
	done
	printf '%s' "$xds_sum" >"$xds_bin.stamp"
	log "built them in $((SECONDS - start))s"
	printf '%s\n' "$xds_bin-client" "$xds_bin-server"
	exit 0
fi

src_sum=$( (cd "$here/peer" && cat $(LC_ALL=C ls ./*.go); cat "$work/root.stamp"; "$go" version) |
	sha256sum | cut -d' ' -f1)
if [ -x "$bin" ] && [ -f "$bin.stamp" ] && [ "$(cat "$bin.stamp")" = "$src_sum" ]; then
	log "up to date"
	echo "$bin"
	exit 0
fi

build() {
	(cd "$here/peer" && "$go" build -trimpath -o "$bin.tmp" .)
}

start=$SECONDS
log "building with $("$go" version)"
if ! build 2>"$work/build.log"; then
	cat "$work/build.log" >&2
	if grep -q 'cannot find package' "$work/build.log" && [ ! -f "$work/full.stamp" ]; then
		log "a package is missing from the list above: fetching the whole dependency closure"
		apt_setup
		mapfile -t closure < <(full_closure)
		[ "${#closure[@]}" -gt 0 ] || { log "could not resolve the dependency closure"; exit 1; }
		fetch_into "$root" "${closure[@]}"
		touch "$work/full.stamp"
		build
	else
		exit 1
	fi
fi
mv "$bin.tmp" "$bin"
printf '%s' "$src_sum" >"$bin.stamp"
log "built $bin in $((SECONDS - start))s"
echo "$bin"
