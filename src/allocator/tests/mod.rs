//! Unit tests of the allocator module, one file per source file.

mod addr;
mod entry;
mod intervals;
mod pool;
mod prefix;
mod set;
mod spec;

use std::net::IpAddr;

/// Parses an address literal in a test.
fn ip(text: &str) -> IpAddr {
    text.parse().expect("test address literal")
}
