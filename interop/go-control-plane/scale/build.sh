#!/usr/bin/env bash
# Builds go-xds-scale (main.go beside this script), the go-control-plane server
# of the end-to-end benchmark (e2e/), into target/interop/go-xds-scale.
#
# It reuses what ../build.sh sets up: that script downloads and unpacks Go and
# go-control-plane from Debian into a private root (see its header and
# ../README.md) and builds the interop server; this one then builds the scale
# server offline against the same root. Same environment variables
# (XDS_INTEROP_OUT, XDS_INTEROP_MIRROR, XDS_INTEROP_SUITE, XDS_INTEROP_GO).
# Idempotent; prints the binary's path as its last line.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../../.." && pwd)
out=${XDS_INTEROP_OUT:-$repo/target/interop}
go_pkg=${XDS_INTEROP_GO:-golang-1.27-go}
go_ver=${go_pkg#golang-}
go_ver=${go_ver%-go}
work=$out/go-control-plane
root=$work/root
bin=$out/go-xds-scale

log() { printf 'interop/go-control-plane/scale/build.sh: %s\n' "$*" >&2; }

bash "$here/../build.sh" >/dev/null

goroot=$root/usr/lib/go-$go_ver
go=$goroot/bin/go
export GO111MODULE=off GOPATH=$root/usr/share/gocode GOROOT=$goroot
export GOCACHE=$work/gocache GOTOOLCHAIN=local GOPROXY=off GOFLAGS= GOENV=off CGO_ENABLED=0
export GOTELEMETRY=off

exec 9>"$work/.scale.lock"
flock 9
src_sum=$( (cat "$here/main.go" "$work/root.stamp"; "$go" version) | sha256sum | cut -d' ' -f1)
if [ -x "$bin" ] && [ -f "$bin.stamp" ] && [ "$(cat "$bin.stamp")" = "$src_sum" ]; then
	log "up to date"
	echo "$bin"
	exit 0
fi
start=$SECONDS
(cd "$here" && "$go" build -trimpath -o "$bin.tmp" .)
mv "$bin.tmp" "$bin"
printf '%s' "$src_sum" >"$bin.stamp"
log "built $bin in $((SECONDS - start))s"
echo "$bin"
