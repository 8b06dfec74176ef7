//! Unit tests of the allocator module, one file per source file.

mod addr;
mod entry;
mod intervals;
mod pool;
mod prefix;
mod set;
mod spec;

use std::net::IpAddr;

use crate::allocator::Counts;

/// Parses an address literal in a test.
fn ip(text: &str) -> IpAddr {
    text.parse().expect("test address literal")
}

/// Each item's `Display` text, to compare with literals.
fn texts<T: ToString>(items: impl IntoIterator<Item = T>) -> Vec<String> {
    items.into_iter().map(|item| item.to_string()).collect()
}

/// Expected counts, in argument order.
fn counts(total: u128, used: u128, free: u128, out_of_range: u128) -> Counts {
    Counts {
        total,
        used,
        free,
        out_of_range,
    }
}
