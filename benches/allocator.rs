//! Allocator benchmarks (criterion) and a memory report (counting global allocator).
//!
//! Scenarios (the sizes real pools reach):
//! - fill an IPv4 /16 one address at a time;
//! - fill a pool of 1,000 scattered ranges one address at a time;
//! - allocate in an IPv6 /64 that already has 1M used addresses (filled from the bottom, and
//!   scattered at random, the worst case for the free-interval index).
//!
//! Prefix pools:
//! - hand out 1,000 /64s of a /48 one by one, and 1,000 IPv4 /28s of a /16;
//! - parse and count a /32 split into /64s (2^32 sub-prefixes, never enumerated);
//! - allocate and release in a /32 of /64s with 1M sub-prefixes used (from the bottom, and at
//!   random).
//!
//! Run: `cargo bench --bench allocator -- --warm-up-time 1 --measurement-time 3`.
//! The memory report is printed first; it measures live heap bytes through the counting
//! allocator below, which also adds a few nanoseconds to every heap allocation in the timings.

use std::hint::black_box;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::time::Instant;

use criterion::measurement::WallTime;
use criterion::{BatchSize, BenchmarkGroup, Criterion, Throughput};
use inpool::allocator::{
    AddressSet, Allocator, Counts, PoolSpecInput, PrefixAllocator, PrefixPoolSpecInput, Subnet,
};

#[path = "common/counting_allocator.rs"]
mod counting_allocator;
use counting_allocator::live_bytes;

const ONE_MILLION: u64 = 1_000_000;

fn pool(addresses: Vec<String>, prefix: i64, gateway: &str) -> AddressSet {
    PoolSpecInput {
        addresses,
        prefix,
        gateway: Some(gateway.to_owned()),
        ..Default::default()
    }
    .parse()
    .expect("valid benchmark pool")
    .into_allocatable()
}

/// 10.0.0.0/16 with gateway 10.0.0.1: 65,533 allocatable addresses.
fn slash16() -> AddressSet {
    pool(vec!["10.0.0.0/16".into()], 16, "10.0.0.1")
}

/// 1,000 ranges of 16 to 63 addresses at irregular offsets in 10.0.0.0/8, listed highest first.
fn scattered_ranges() -> (Vec<String>, AddressSet) {
    let base = u32::from(Ipv4Addr::new(10, 0, 0, 0));
    let entries: Vec<String> = (0..1000u32)
        .rev()
        .map(|i| {
            let first = base + i * 1024 + (i * 37) % 512;
            let last = first + 15 + i % 48;
            format!("{}-{}", Ipv4Addr::from(first), Ipv4Addr::from(last))
        })
        .collect();
    let set = pool(entries.clone(), 8, "10.255.255.254");
    assert_eq!(set.range_count(), 1000);
    (entries, set)
}

fn slash64() -> AddressSet {
    pool(vec!["2001:db8::/64".into()], 64, "2001:db8::1")
}

/// 2001:db8::
const SLASH64_BASE: u128 = 0x2001_0db8 << 96;

fn slash64_address(offset: u64) -> IpAddr {
    IpAddr::V6(Ipv6Addr::from(SLASH64_BASE + u128::from(offset)))
}

/// Deterministic pseudo-random offsets (xorshift64*).
struct Random(u64);

impl Random {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
}

/// A /64 with 1M addresses used from the bottom (what lowest-first allocation produces).
fn slash64_filled_from_bottom(pool: AddressSet) -> Allocator {
    let mut allocator = Allocator::new(pool);
    for _ in 0..ONE_MILLION {
        allocator.allocate_lowest().unwrap();
    }
    allocator
}

/// A /64 with 1M addresses used at random places: about 1M free intervals.
fn slash64_scattered(pool: AddressSet) -> Allocator {
    let mut random = Random(0x9e37_79b9_7f4a_7c15);
    let mut allocator = Allocator::new(pool);
    let mut marked = 0;
    while marked < ONE_MILLION {
        marked += u64::from(allocator.mark_used(slash64_address(random.next())));
    }
    allocator
}

fn fill(allocator: &mut Allocator) -> usize {
    let mut count = 0;
    while allocator.allocate_lowest().is_ok() {
        count += 1;
    }
    count
}

/// Heap bytes that `build` adds to `pool` (whose own bytes are not counted), divided by the
/// number of used addresses.
fn bytes_per_used_address(
    name: &str,
    pool: AddressSet,
    build: impl FnOnce(AddressSet) -> Allocator,
) {
    report_built(
        name,
        "address",
        || build(pool),
        |allocator| (allocator.counts().used, allocator.stored_ranges()),
    );
}

/// Runs `build`, then prints the heap bytes it added per used item and its intervals, as
/// told by `stats` (used items, entries).
fn report_built<T>(
    name: &str,
    item: &str,
    build: impl FnOnce() -> T,
    stats: impl FnOnce(&T) -> (u128, usize),
) {
    let before = live_bytes();
    let start = Instant::now();
    let built = build();
    let elapsed = start.elapsed();
    let bytes = live_bytes() - before;
    let (used, entries) = stats(&built);
    println!(
        "memory | {name}: {used} used, {entries} intervals, {bytes} heap bytes, {:.3} bytes per used {item} (built in {:.0} ms)",
        bytes as f64 / used as f64,
        elapsed.as_secs_f64() * 1e3,
    );
    drop(black_box(built));
}

fn report_memory() {
    let filled = |pool| {
        let mut allocator = Allocator::new(pool);
        fill(&mut allocator);
        allocator
    };
    bytes_per_used_address("IPv4 /16 filled", slash16(), filled);
    bytes_per_used_address("1,000 ranges filled", scattered_ranges().1, filled);
    bytes_per_used_address(
        "IPv6 /64, 1M used from the bottom",
        slash64(),
        slash64_filled_from_bottom,
    );
    bytes_per_used_address(
        "IPv6 /64, 1M used at random (mark_used)",
        slash64(),
        slash64_scattered,
    );

    let mut allocator = slash64_scattered(slash64());
    let start = Instant::now();
    allocator.resize(slash64());
    println!(
        "timing | resize of the /64 with 1M scattered used addresses: {:.0} ms",
        start.elapsed().as_secs_f64() * 1e3
    );
}

fn bench_fills(c: &mut Criterion) {
    let mut group = c.benchmark_group("fill");
    let set = slash16();
    group.throughput(Throughput::Elements(set.len() as u64));
    group.bench_function("ipv4_slash16", |b| {
        b.iter_batched(
            || Allocator::new(set.clone()),
            |mut a| fill(&mut a),
            BatchSize::LargeInput,
        )
    });
    let (entries, set) = scattered_ranges();
    group.throughput(Throughput::Elements(set.len() as u64));
    group.bench_function("1000_scattered_ranges", |b| {
        b.iter_batched(
            || Allocator::new(set.clone()),
            |mut a| fill(&mut a),
            BatchSize::LargeInput,
        )
    });
    group.finish();

    let mut group = c.benchmark_group("parse");
    group.throughput(Throughput::Elements(entries.len() as u64));
    let input = PoolSpecInput {
        addresses: entries,
        prefix: 8,
        ..Default::default()
    };
    group.bench_function("1000_range_entries", |b| b.iter(|| input.parse().unwrap()));
    group.finish();
}

/// What the "1M used" benchmarks exercise, in IP and prefix allocators alike.
trait UsedPool {
    type Key: Copy;
    fn take_lowest(&mut self) -> Self::Key;
    fn take(&mut self, key: Self::Key) -> bool;
    fn give_back(&mut self, key: Self::Key) -> bool;
    fn is_used(&self, key: Self::Key) -> bool;
    fn counts(&self) -> Counts;
}

/// The same forwarding for both allocators: their methods have the same names and shapes.
macro_rules! used_pool {
    ($allocator:ty, $key:ty) => {
        impl UsedPool for $allocator {
            type Key = $key;
            fn take_lowest(&mut self) -> $key {
                self.allocate_lowest().unwrap()
            }
            fn take(&mut self, key: $key) -> bool {
                self.allocate(key).is_ok()
            }
            fn give_back(&mut self, key: $key) -> bool {
                self.release(key)
            }
            fn is_used(&self, key: $key) -> bool {
                <$allocator>::is_used(self, key)
            }
            fn counts(&self) -> Counts {
                <$allocator>::counts(self)
            }
        }
    };
}

used_pool!(Allocator, IpAddr);
used_pool!(PrefixAllocator, Subnet);

/// Allocate + release (lowest, and at random keys from `key`), `is_used` and `counts` on a pool
/// that already has many used keys.
fn bench_1m_used<A: UsedPool>(
    group: &mut BenchmarkGroup<'_, WallTime>,
    pattern: &str,
    allocator: &mut A,
    key: fn(u64) -> A::Key,
) {
    group.bench_function(format!("{pattern}/allocate_lowest+release"), |b| {
        b.iter(|| {
            let taken = allocator.take_lowest();
            allocator.give_back(black_box(taken))
        })
    });
    let mut random = Random(42);
    group.bench_function(format!("{pattern}/allocate_specific+release"), |b| {
        b.iter(|| {
            let wanted = key(random.next());
            if allocator.take(wanted) {
                allocator.give_back(wanted);
            }
        })
    });
    group.bench_function(format!("{pattern}/is_used"), |b| {
        b.iter(|| allocator.is_used(key(random.next())))
    });
    group.bench_function(format!("{pattern}/counts"), |b| {
        b.iter(|| allocator.counts())
    });
}

fn bench_slash64(c: &mut Criterion) {
    let mut group = c.benchmark_group("ipv6_slash64_1m_used");
    group.throughput(Throughput::Elements(1));
    for (pattern, mut allocator) in [
        ("from_bottom", slash64_filled_from_bottom(slash64())),
        ("scattered", slash64_scattered(slash64())),
    ] {
        bench_1m_used(&mut group, pattern, &mut allocator, slash64_address);
    }
    group.finish();
}

fn prefix_spec(prefixes: &[&str], length: i64) -> PrefixPoolSpecInput {
    PrefixPoolSpecInput {
        prefixes: prefixes.iter().map(|text| text.to_string()).collect(),
        allocation_prefix_length: Some(length),
        ..Default::default()
    }
}

/// 2001:db8::/32 split into /64s: 2^32 sub-prefixes.
fn slash32_of_slash64s() -> PrefixAllocator {
    let pool = prefix_spec(&["2001:db8::/32"], 64)
        .parse()
        .expect("valid benchmark prefix pool");
    PrefixAllocator::new(pool)
}

/// The `offset`-th /64 of 2001:db8::/32 (`offset` below 2^32).
fn slash32_sub_prefix(offset: u64) -> Subnet {
    let network = SLASH64_BASE + (u128::from(offset & 0xffff_ffff) << 64);
    Subnet::new(IpAddr::V6(Ipv6Addr::from(network)), 64).expect("aligned /64")
}

/// 1M /64s used from the bottom (what first-fit produces).
fn prefixes_filled_from_bottom() -> PrefixAllocator {
    let mut allocator = slash32_of_slash64s();
    for _ in 0..ONE_MILLION {
        allocator.allocate_lowest().unwrap();
    }
    allocator
}

/// 1M /64s used at random places: about 1M free runs.
fn prefixes_scattered() -> PrefixAllocator {
    let mut random = Random(0x9e37_79b9_7f4a_7c15);
    let mut allocator = slash32_of_slash64s();
    let mut marked = 0;
    while marked < ONE_MILLION {
        marked += u64::from(
            allocator
                .mark_used(slash32_sub_prefix(random.next()))
                .unwrap(),
        );
    }
    allocator
}

fn report_prefix_memory() {
    let stats = |allocator: &PrefixAllocator| (allocator.counts().used, allocator.stored_ranges());
    report_built(
        "/32 of /64s, 1M used from the bottom",
        "sub-prefix",
        prefixes_filled_from_bottom,
        stats,
    );
    report_built(
        "/32 of /64s, 1M used at random (mark_used)",
        "sub-prefix",
        prefixes_scattered,
        stats,
    );
}

fn bench_prefixes(c: &mut Criterion) {
    let mut group = c.benchmark_group("prefix");
    group.throughput(Throughput::Elements(1000));
    for (name, prefix, length) in [
        ("1000_slash64s_of_a_slash48", "2001:db8::/48", 64),
        ("1000_ipv4_slash28s_of_a_slash16", "10.0.0.0/16", 28),
    ] {
        let pool = prefix_spec(&[prefix], length).parse().expect(prefix);
        group.bench_function(name, |b| {
            b.iter_batched(
                || PrefixAllocator::new(pool.clone()),
                |mut allocator| {
                    for _ in 0..1000 {
                        black_box(allocator.allocate_lowest().unwrap());
                    }
                    allocator
                },
                BatchSize::LargeInput,
            )
        });
    }
    group.throughput(Throughput::Elements(1));
    let spec = prefix_spec(&["2001:db8::/32"], 64);
    group.bench_function("slash32_of_slash64s/parse+new+counts", |b| {
        b.iter(|| {
            let allocator = PrefixAllocator::new(spec.parse().unwrap());
            black_box(allocator.counts())
        })
    });
    let entries: Vec<String> = (0..1000u32)
        .rev()
        .map(|i| format!("2001:db8:{i:x}::/48"))
        .collect();
    let many = PrefixPoolSpecInput {
        prefixes: entries,
        allocation_prefix_length: Some(64),
        excluded_prefixes: vec!["2001:db8:1::-2001:db8:1:ff::".into()],
        ..Default::default()
    };
    group.throughput(Throughput::Elements(1000));
    group.bench_function("parse_1000_prefix_entries", |b| {
        b.iter(|| many.parse().unwrap())
    });
    group.finish();

    let mut group = c.benchmark_group("prefix_slash32_of_slash64s_1m_used");
    group.throughput(Throughput::Elements(1));
    for (pattern, mut allocator) in [
        ("from_bottom", prefixes_filled_from_bottom()),
        ("scattered", prefixes_scattered()),
    ] {
        bench_1m_used(&mut group, pattern, &mut allocator, slash32_sub_prefix);
    }
    group.finish();
}

fn main() {
    report_memory();
    report_prefix_memory();
    let mut criterion = Criterion::default().configure_from_args();
    bench_fills(&mut criterion);
    bench_slash64(&mut criterion);
    bench_prefixes(&mut criterion);
    criterion.final_summary();
}
