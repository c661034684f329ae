#!/usr/bin/env bash
# The project's test command: `./scripts/test.sh`.
#
# 1. Gates: `cargo fmt --check`; `cargo clippy --workspace --all-targets -- -D warnings`;
#    `cargo doc --workspace --no-deps` with rustdoc warnings denied (broken links, missing
#    docs where a crate warns on them).
# 2. `cargo test --workspace`: unit, scenario, property and fuzz-regression tests, doc
#    tests, the examples (built; custom_loop and xds_channel then run), and the
#    deterministic simulation over a bounded number of seeds (XDS_SIM_SEEDS, default in
#    tests/tests/simulation.rs), and gRPC's xDS interop cases against the xds-interop
#    binaries and gRPC-Go's (xds-interop/tests/xds_cases, about 40 s).
# 3. A fuzz smoke test: installs cargo-fuzz if it is missing, builds every target in fuzz/
#    once, and runs each for FUZZ_SECONDS (default 60) on stable (`--sanitizer none`),
#    starting from the committed seeds.
#
# The last line counts what ran: one per gate, cargo's passed/failed tests, plus one per
# fuzz target.
set -uo pipefail
cd "$(dirname "$0")/.."
export CARGO_TERM_COLOR=never
FUZZ_SECONDS="${FUZZ_SECONDS:-60}"
passed=0
failed=0
failures=()
log="$(mktemp)"
trap 'rm -f "$log"' EXIT
# A build that runs out of disk fails as a link error; the space left says so at once.
disk_free() { df -h . | awk 'NR == 2 { print "disk free at " $6 ": " $4 " of " $2 }'; }
disk_free

gate() {
    local name="$1"
    shift
    echo "== gate: $name"
    if "$@"; then
        passed=$((passed + 1))
    else
        echo "gate FAILED: $name"
        failed=$((failed + 1))
        failures+=("gate: $name")
    fi
}
gate "cargo fmt --check" cargo fmt --all -- --check
gate "cargo clippy -D warnings" cargo clippy --workspace --all-targets -- -D warnings
gate "cargo doc (warnings denied)" env RUSTDOCFLAGS="-D warnings" cargo doc --workspace --no-deps --quiet

echo "== cargo test --workspace"
cargo test --workspace 2>&1 | tee "$log"
test_status=${PIPESTATUS[0]}
read -r p f < <(awk '/^test result:/ {
    for (i = 2; i <= NF; i++) {
        if ($i ~ /^passed;?$/) p += $(i - 1)
        if ($i ~ /^failed;?$/) f += $(i - 1)
    }
} END { print p + 0, f + 0 }' "$log")
passed=$((passed + p))
failed=$((failed + f))
if [ "$test_status" -ne 0 ] && [ "$f" -eq 0 ]; then
    echo "cargo test failed before running its tests (build error?)"
    failed=$((failed + 1))
    failures+=("cargo test: failed before running its tests (build error?)")
fi

# The embedding example runs (its assertions check the path from a watch to a pick).
gate "example custom_loop" cargo run --quiet -p xds-proto-core --example custom_loop
# The tonic example runs: 200 RPCs through an xds:/// channel to the demo's echo
# backends on loopback (about a second).
gate "example xds_channel" cargo run --quiet -p xds-examples --example xds_channel
gate "example custom_lb_policy" cargo run --quiet -p xds-proto-core --example custom_lb_policy

echo "== fuzz smoke: every target for ${FUZZ_SECONDS}s"
if ! command -v cargo-fuzz >/dev/null 2>&1; then
    cargo install cargo-fuzz --locked || { echo "cannot install cargo-fuzz"; failed=$((failed + 1)); failures+=("cargo-fuzz install"); }
fi
if command -v cargo-fuzz >/dev/null 2>&1; then
    if (cd fuzz && cargo fuzz build --sanitizer none); then
        for target in $(cd fuzz && cargo fuzz list); do
            mkdir -p "fuzz/corpus/$target"
            if (cd fuzz && cargo fuzz run --sanitizer none "$target" "corpus/$target" "seeds/$target" -- \
                    -max_total_time="$FUZZ_SECONDS" -timeout=20 -rss_limit_mb=4096 -print_final_stats=1); then
                echo "fuzz target $target: no crash in ${FUZZ_SECONDS}s"
                passed=$((passed + 1))
            else
                echo "fuzz target $target FAILED: see fuzz/artifacts/$target; copy the input to fuzz/regressions/$target"
                failed=$((failed + 1))
                failures+=("fuzz target: $target")
            fi
        done
    else
        echo "fuzz targets do not build"
        failed=$((failed + 1))
        failures+=("fuzz targets do not build")
    fi
fi

# CI shows only the tail of this output, so what failed is repeated right above the
# summary: each failed gate and fuzz target, and each failed test with the start of
# its panic message.
if [ "$failed" -ne 0 ]; then
    echo "== what failed"
    for f in "${failures[@]}"; do echo "$f"; done
    grep -E '^test .* \.\.\. FAILED$' "$log"
    awk '/^---- .* stdout ----$/ { n = 25 } n > 0 { print; n-- }' "$log"
    disk_free
fi
echo "summary: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
