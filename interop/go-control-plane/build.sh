#!/usr/bin/env bash
# Builds the go-control-plane interop server (server.go beside this script)
# into target/interop/go-xds-server.
#
# Go and go-control-plane come from Debian: trixie-backports has
# golang-github-envoyproxy-go-control-plane-dev and golang-1.27-go (bookworm
# has neither). Nothing is installed on the system: a private apt
# configuration (its own sources, lists and cache under the output directory)
# downloads the .debs, `dpkg-deb -x` unpacks them into a private root, and the
# server is built offline in GOPATH mode against that root. The only network
# access is to the Debian archive, and only on a cold run.
#
# Idempotent: a warm run (packages unpacked, binary built from the same
# server.go) checks two stamps and exits in well under a second. Safe to run
# concurrently (flock).
#
# Environment:
#   XDS_INTEROP_OUT      output directory (default: <repo>/target/interop)
#   XDS_INTEROP_MIRROR   Debian mirror (default: http://deb.debian.org/debian)
#   XDS_INTEROP_SUITE    trixie-backports (default) or sid
#   XDS_INTEROP_GO       Go toolchain package (default: golang-1.27-go)
# Prints the binary's path as its last line.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)
out=${XDS_INTEROP_OUT:-$repo/target/interop}
mirror=${XDS_INTEROP_MIRROR:-http://deb.debian.org/debian}
suite=${XDS_INTEROP_SUITE:-trixie-backports}
go_pkg=${XDS_INTEROP_GO:-golang-1.27-go}
go_ver=${go_pkg#golang-}
go_ver=${go_ver%-go}

work=$out/go-control-plane     # apt state, .debs, unpacked root, Go build cache
root=$work/root                # the unpacked packages (usr/lib/go-*, usr/share/gocode)
bin=$out/go-xds-server

# What server.go imports, package by package (checked with `go list -deps`).
# If a newer Debian version grows an import outside this list, the build falls
# back once to the whole Debian dependency closure (about 250 MB more).
packages=(
	"$go_pkg" "golang-$go_ver-src"
	golang-github-envoyproxy-go-control-plane-dev
	golang-github-envoyproxy-protoc-gen-validate-dev
	golang-github-cncf-xds-dev
	golang-cel-expr-dev
	golang-google-grpc-dev
	golang-google-genproto-dev
	golang-google-protobuf-dev
	golang-github-golang-protobuf-1-5-dev
	golang-golang-x-net-dev
	golang-golang-x-sys-dev
	golang-golang-x-text-dev
)

log() { printf 'interop/go-control-plane/build.sh: %s\n' "$*" >&2; }

mkdir -p "$work"
exec 9>"$work/.lock"
flock 9

case "$suite" in
sid | unstable) suites="sid" ;;
*-backports) suites="${suite%-backports} $suite" ;;
*) suites="$suite" ;;
esac

# ---- private apt ----
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
	# The files are ours; no point dropping to _apt (it could not write them).
	apt_opts+=(-o "APT::Sandbox::User=root")
fi

apt_setup() {
	mkdir -p "$apt_dir/sources.list.d" "$apt_dir/preferences.d" \
		"$apt_dir/state/lists/partial" "$apt_dir/cache/archives/partial"
	: >"$apt_dir/state/status"
	# No system hooks: /etc/apt/apt.conf.d may run cache cleaners, appstream or
	# packagekit after an update; none of them concerns these private lists.
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

# Every golang-* package in the Depends closure of go-control-plane and Go.
full_closure() {
	apt-get "${apt_opts[@]}" -s -t "$suite" --no-install-recommends install \
		golang-github-envoyproxy-go-control-plane-dev "$go_pkg" 2>/dev/null |
		awk '/^Inst golang-/ {print $2}'
}

fingerprint="suite=$suite mirror=$mirror packages=${packages[*]}"
if [ ! -f "$work/root.stamp" ] || [ "$(cat "$work/root.stamp")" != "$fingerprint" ] ||
	[ ! -x "$root/usr/lib/go-$go_ver/bin/go" ]; then
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

goroot=$root/usr/lib/go-$go_ver
go=$goroot/bin/go
export GO111MODULE=off GOPATH=$root/usr/share/gocode GOROOT=$goroot
export GOCACHE=$work/gocache GOTOOLCHAIN=local GOPROXY=off GOFLAGS= GOENV=off CGO_ENABLED=0
export GOTELEMETRY=off

src_sum=$( (cat "$here/server.go" "$work/root.stamp"; "$go" version) | sha256sum | cut -d' ' -f1)
if [ -x "$bin" ] && [ -f "$bin.stamp" ] && [ "$(cat "$bin.stamp")" = "$src_sum" ]; then
	log "up to date"
	echo "$bin"
	exit 0
fi

build() {
	(cd "$here" && "$go" build -trimpath -o "$bin.tmp" .)
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
