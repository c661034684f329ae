//! Config selector pick cost for 10, 100, 1,000 and 5,000 routes.
//!
//! Route tables look like a large gRPC mesh, 8 routes per service: mostly exact
//! `/pkg.ServiceN/MethodM` paths; per 20 routes one `/pkg.ServiceN/` service prefix
//! (shadowing the later routes of its service), one header-matched exact path
//! (`x-tenant: gold`), one weighted split (5/95) and, up to route 1,000, one regex with a
//! literal service (`/pkg\.RegexN/.*`, indexed by it); one regex without a literal start
//! per 1,000 routes (`.*/DebugN`, on the scan list); and a catch-all last route.
//!
//! Two sets of 64 RPCs are routed per iteration:
//! - `indexed`: methods spread over the whole table (early, middle and late routes,
//!   exact, header-matched, weighted and prefix-shadowed) and one unknown service that
//!   only the catch-all takes;
//! - `unlisted`: paths that are no route's exact path: unlisted methods of listed
//!   services (service prefix or catch-all), hits of the indexed regexes, hits of the
//!   `.*/DebugN` regexes, and unknown services.
//!
//! Criterion reports picks per second as its throughput; before the measurement a
//! counting global allocator reports allocations per pick, and the selector's build time
//! is printed. A linear first-match scan over the same table is measured for comparison.
//!
//! Run: `cargo bench -p xds-proto-core --bench selector`.

use std::hint::black_box;
use std::time::{Duration, Instant};

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use xds_proto_core::pb::envoy::r#type::matcher::v3::string_matcher::MatchPattern;
use xds_proto_core::resource::route::RouteConfigResource;
use xds_proto_core::selector::{ClusterRegistry, ConfigSelector, route_matches};
use xds_proto_testing::alloc::{self, CountingAlloc};
use xds_proto_testing::peer::SplitMix;
use xds_proto_testing::resources::{
    cluster_action, decode_rc, forward, header, path, prefix, regex, routes_config, string_match,
    weighted_action, with_header,
};

#[global_allocator]
static GLOBAL: CountingAlloc = CountingAlloc;

const SIZES: [usize; 4] = [10, 100, 1_000, 5_000];
const METADATA: [(&str, &str); 2] = [("x-tenant", "gold"), ("user-agent", "bench/1.0")];

/// `n` routes (the last a catch-all), the 64 `indexed` paths and the 64 `unlisted` ones.
fn table(n: usize) -> (RouteConfigResource, Vec<String>, Vec<String>) {
    let mut routes = Vec::with_capacity(n);
    for i in 0..n - 1 {
        let svc = format!("/pkg.Service{}", i / 8);
        let method = path(&format!("{svc}/Method{i}"));
        let cluster_i = cluster_action(&format!("c{}", i % 16));
        let r = match i % 20 {
            // A service prefix (it shadows the later routes of its own service).
            7 => forward(prefix(&format!("{svc}/")), cluster_i),
            // A header-matched exact route.
            11 => {
                let gold = header(
                    "x-tenant",
                    string_match(MatchPattern::Exact("gold".to_string()), false),
                    false,
                );
                forward(with_header(method, gold), cluster_i)
            }
            // A weighted split.
            13 => forward(method, weighted_action(&[("canary", 5), ("stable", 95)])),
            // A regex with a literal service (indexed by it), one in 20 routes up to 1,000.
            17 if i < 1_000 => forward(regex(&format!("/pkg\\.Regex{i}/.*")), cluster_i),
            // A regex without a literal start (scanned on every later pick), one per 1,000.
            19 if i % 1_000 == 999 => forward(regex(&format!(".*/Debug{i}")), cluster_i),
            _ => forward(method, cluster_i),
        };
        routes.push(r);
    }
    routes.push(forward(prefix(""), cluster_action("default")));
    let rc = routes_config(&format!("rc-{n}"), routes);
    let decoded = decode_rc(&rc).expect("valid route configuration");
    // 63 paths spread over the table (exact, header-matched, weighted, prefix-matched)
    // plus one that only the catch-all matches.
    let mut paths: Vec<String> = (0..63)
        .map(|k| {
            let i = (k * (n - 1)) / 63;
            format!("/pkg.Service{}/Method{}", i / 8, i)
        })
        .collect();
    paths.push("/other.Unknown/Call".to_string());
    let unlisted = (0..64)
        .map(|k| {
            let i = (k * (n - 1)) / 64;
            match k % 4 {
                0 => format!("/pkg.Service{}/Unlisted{k}", i / 8),
                1 => format!("/pkg.Regex{}/Call", (i.min(999) / 20) * 20 + 17),
                2 => format!("/other.Svc{k}/Debug{}", (i / 1_000) * 1_000 + 999),
                _ => format!("/other.Unknown{k}/Call"),
            }
        })
        .collect();
    (decoded, paths, unlisted)
}

fn allocations_per_pick(selector: &ConfigSelector, paths: &[String]) -> f64 {
    let mut rng = SplitMix(7);
    for p in paths {
        black_box(selector.select(p, &METADATA[..], &mut rng).ok());
    }
    let rounds = 2_000;
    let before = alloc::allocations();
    for _ in 0..rounds {
        for p in paths {
            black_box(
                selector
                    .select(black_box(p.as_str()), &METADATA[..], &mut rng)
                    .ok(),
            );
        }
    }
    let after = alloc::allocations();
    (after - before) as f64 / (rounds * paths.len()) as f64
}

fn picks_per_second(selector: &ConfigSelector, paths: &[String]) -> f64 {
    let mut rng = SplitMix(9);
    let start = Instant::now();
    let mut picks = 0u64;
    while start.elapsed() < Duration::from_millis(300) {
        for p in paths {
            black_box(
                selector
                    .select(black_box(p.as_str()), &METADATA[..], &mut rng)
                    .ok(),
            );
        }
        picks += paths.len() as u64;
    }
    picks as f64 / start.elapsed().as_secs_f64()
}

fn bench(c: &mut Criterion) {
    let mut group = c.benchmark_group("select");
    for n in SIZES {
        let (rc, paths, unlisted) = table(n);
        let mut registry = ClusterRegistry::new();
        // The build time: the best of a few builds (other work shares the machine).
        let build = (0..5)
            .map(|_| {
                let start = Instant::now();
                let s = ConfigSelector::from_virtual_host(
                    &rc.virtual_hosts[0],
                    &[],
                    None,
                    &mut registry,
                );
                let elapsed = start.elapsed();
                drop(s);
                elapsed
            })
            .min()
            .unwrap_or_default();
        let selector =
            ConfigSelector::from_virtual_host(&rc.virtual_hosts[0], &[], None, &mut registry);
        let stats = selector.route_table().stats();
        println!(
            "selector routes={n:>5} exact={:>4} service={:>3} scanned={:>3} (regexes in DFAs={}) precomputed paths={:>4}: built in {:.3} ms",
            stats.exact,
            stats.service,
            stats.scanned,
            stats.grouped_regexes,
            stats.memoized_paths,
            build.as_secs_f64() * 1e3,
        );
        for (name, set) in [("indexed", &paths), ("unlisted", &unlisted)] {
            let allocs = allocations_per_pick(&selector, set);
            let rate = picks_per_second(&selector, set);
            println!(
                "  {name:<8}: {:>6.2} M picks/s ({:>5.0} ns/pick), {allocs:.3} allocations/pick",
                rate / 1e6,
                1e9 / rate
            );
        }
        group.throughput(Throughput::Elements(paths.len() as u64));
        for (name, set) in [("indexed", &paths), ("unlisted", &unlisted)] {
            group.bench_with_input(BenchmarkId::new(name, n), set, |b, paths| {
                let mut rng = SplitMix(11);
                b.iter(|| {
                    for p in paths {
                        black_box(
                            selector
                                .select(black_box(p.as_str()), &METADATA[..], &mut rng)
                                .ok(),
                        );
                    }
                });
            });
        }
        if n == 5_000 {
            let matchers = selector.route_table().matchers();
            group.bench_with_input(
                BenchmarkId::new("linear-reference", n),
                &paths,
                |b, paths| {
                    let mut rng = SplitMix(13);
                    b.iter(|| {
                        for p in paths {
                            black_box(matchers.iter().position(|m| {
                                route_matches(m, black_box(p.as_str()), &METADATA[..], &mut rng)
                            }));
                        }
                    });
                },
            );
        }
    }
    group.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2))
        .sample_size(30);
    targets = bench
}
criterion_main!(benches);
