//! Allocator benchmarks (criterion) and a memory report (counting global allocator).
//!
//! Scenarios from issue 4:
//! - fill an IPv4 /16 one address at a time;
//! - fill a pool of 1,000 scattered ranges one address at a time;
//! - allocate in an IPv6 /64 that already has 1M used addresses (filled from the bottom, and
//!   scattered at random, the worst case for the free-interval index).
//!
//! Run: `cargo bench --bench allocator -- --warm-up-time 1 --measurement-time 3`.
//! The memory report is printed first; it measures live heap bytes through the counting
//! allocator below, which also adds a few nanoseconds to every heap allocation in the timings.

use std::alloc::{GlobalAlloc, Layout, System};
use std::hint::black_box;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::sync::atomic::{AtomicIsize, Ordering};
use std::time::Instant;

use criterion::{BatchSize, Criterion, Throughput};
use inpool::allocator::{AddressSet, Allocator, PoolSpecInput};

/// Tracks live heap bytes.
struct CountingAllocator;

static LIVE_BYTES: AtomicIsize = AtomicIsize::new(0);

// SAFETY: every method forwards to `System` unchanged and only adds bookkeeping.
unsafe impl GlobalAlloc for CountingAllocator {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: same contract as the caller's.
        let ptr = unsafe { System.alloc(layout) };
        if !ptr.is_null() {
            LIVE_BYTES.fetch_add(layout.size() as isize, Ordering::Relaxed);
        }
        ptr
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: same contract as the caller's.
        unsafe { System.dealloc(ptr, layout) };
        LIVE_BYTES.fetch_sub(layout.size() as isize, Ordering::Relaxed);
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: same contract as the caller's.
        let new = unsafe { System.realloc(ptr, layout, new_size) };
        if !new.is_null() {
            LIVE_BYTES.fetch_add(
                new_size as isize - layout.size() as isize,
                Ordering::Relaxed,
            );
        }
        new
    }
}

#[global_allocator]
static GLOBAL: CountingAllocator = CountingAllocator;

fn live_bytes() -> isize {
    LIVE_BYTES.load(Ordering::Relaxed)
}

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
    let before = live_bytes();
    let start = Instant::now();
    let allocator = build(pool);
    let elapsed = start.elapsed();
    let bytes = live_bytes() - before;
    let used = allocator.counts().used;
    println!(
        "memory | {name}: {used} used, {} B-tree entries, {bytes} heap bytes, {:.3} bytes per used address (built in {:.0} ms)",
        allocator.stored_ranges(),
        bytes as f64 / used as f64,
        elapsed.as_secs_f64() * 1e3,
    );
    drop(black_box(allocator));
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

fn bench_slash64(c: &mut Criterion) {
    let mut group = c.benchmark_group("ipv6_slash64_1m_used");
    group.throughput(Throughput::Elements(1));
    for (pattern, mut allocator) in [
        ("from_bottom", slash64_filled_from_bottom(slash64())),
        ("scattered", slash64_scattered(slash64())),
    ] {
        group.bench_function(format!("{pattern}/allocate_lowest+release"), |b| {
            b.iter(|| {
                let ip = allocator.allocate_lowest().unwrap();
                allocator.release(black_box(ip))
            })
        });
        let mut random = Random(42);
        group.bench_function(format!("{pattern}/allocate_specific+release"), |b| {
            b.iter(|| {
                let ip = slash64_address(random.next());
                if allocator.allocate(ip).is_ok() {
                    allocator.release(ip);
                }
            })
        });
        group.bench_function(format!("{pattern}/is_used"), |b| {
            b.iter(|| allocator.is_used(slash64_address(random.next())))
        });
        group.bench_function(format!("{pattern}/counts"), |b| {
            b.iter(|| allocator.counts())
        });
    }
    group.finish();
}

fn main() {
    report_memory();
    let mut criterion = Criterion::default().configure_from_args();
    bench_fills(&mut criterion);
    bench_slash64(&mut criterion);
    criterion.final_summary();
}
