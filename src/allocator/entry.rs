//! Parsing of one pool entry: a single address, a CIDR, or a `first-last` range.
//!
//! The grammar follows the reference provider (Go `netip` / `netipx`): an entry containing `-`
//! is a range of two plain addresses, else one containing `/` is a CIDR, else it is a single
//! address. No whitespace is allowed anywhere (Go's parsers reject it too). A CIDR may have host
//! bits set (`10.0.0.5/24`); it stands for its whole network, as `netipx.IPSetBuilder.AddPrefix`
//! does.

use std::net::IpAddr;
use std::str::FromStr;

use super::addr::{AddrRange, Family, Subnet, host_mask, to_bits};

/// Why an entry string is not a valid address, CIDR or range.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum EntryError {
    #[error("empty")]
    Empty,
    #[error("contains whitespace")]
    Whitespace,
    #[error("IPv6 zones (`%...`) are not allowed")]
    Zone,
    #[error("`{0}` is an IPv4-mapped IPv6 address, which is not allowed: write the IPv4 address")]
    Mapped(String),
    #[error("not an IP address")]
    NotAnAddress,
    #[error("range start `{0}` is not an IP address")]
    RangeStart(String),
    #[error("range end `{0}` is not an IP address")]
    RangeEnd(String),
    #[error("range end before start")]
    RangeEndBeforeStart,
    #[error("range start and end are of different address families")]
    RangeMixedFamilies,
    #[error("`{0}` before the `/` is not an IP address")]
    CidrAddress(String),
    #[error("prefix length `{len}` is not a number between 0 and {max}")]
    CidrLength { len: String, max: u8 },
    #[error("not a CIDR (`address/length`)")]
    NotACidr,
    #[error("not network-aligned: host bits are set (the network is {network})")]
    NotAligned { network: Subnet },
}

/// Longest piece of user input repeated inside an error message.
const MAX_SHOWN: usize = 80;

/// `text` cut to [`MAX_SHOWN`] characters, so that hostile input cannot blow up messages.
pub(crate) fn shorten(text: &str) -> String {
    match text.char_indices().nth(MAX_SHOWN) {
        None => text.to_owned(),
        Some((cut, _)) => format!("{}…", &text[..cut]),
    }
}

/// Parses a single IP address (no range, no CIDR), as for `gateway`.
pub fn parse_ip(text: &str) -> Result<IpAddr, EntryError> {
    check_characters(text)?;
    address(text, || EntryError::NotAnAddress)
}

/// One address of an entry, `not_one` when `text` is none. An IPv4-mapped IPv6 address
/// (`::ffff:10.0.0.1`) is refused, as the Kubernetes CEL library's `isIP` and `isCIDR` refuse it
/// (so the CRDs' rules do): which family it belongs to is ambiguous, and Go's `netip`, which the
/// reference parses with, keeps it IPv6 while `net.ParseIP` makes it IPv4.
fn address(text: &str, not_one: impl FnOnce() -> EntryError) -> Result<IpAddr, EntryError> {
    let ip: IpAddr = text.parse().map_err(|_| not_one())?;
    match ip {
        IpAddr::V6(v6) if v6.to_ipv4_mapped().is_some() => Err(EntryError::Mapped(shorten(text))),
        _ => Ok(ip),
    }
}

/// Parses one `addresses` / `excludedAddresses` entry into the range it denotes.
pub fn parse_entry(text: &str) -> Result<AddrRange, EntryError> {
    check_characters(text)?;
    if let Some((start, end)) = text.split_once('-') {
        parse_range(start, end)
    } else if let Some((addr, len)) = text.split_once('/') {
        parse_cidr_range(addr, len)
    } else {
        address(text, || EntryError::NotAnAddress).map(AddrRange::single)
    }
}

/// Parses a network-aligned CIDR (`fd00::/48`), as a prefix pool's `prefixes` entries must be.
/// A single address or a range is [`EntryError::NotACidr`]; host bits set
/// (`fd00::1/48`) is [`EntryError::NotAligned`], naming the network that was probably meant.
pub fn parse_network(text: &str) -> Result<Subnet, EntryError> {
    check_characters(text)?;
    let (addr, len) = text
        .split_once('/')
        .filter(|_| !text.contains('-'))
        .ok_or(EntryError::NotACidr)?;
    let (ip, prefix) = cidr_parts(addr, len)?;
    // `cidr_parts` bounds the length by the family width, so this always holds a subnet.
    let network = Subnet::containing(ip, prefix).ok_or(EntryError::NotACidr)?;
    if network.network() == ip {
        Ok(network)
    } else {
        Err(EntryError::NotAligned { network })
    }
}

impl FromStr for AddrRange {
    type Err = EntryError;

    /// Same as [`parse_entry`].
    fn from_str(text: &str) -> Result<Self, Self::Err> {
        parse_entry(text)
    }
}

fn check_characters(text: &str) -> Result<(), EntryError> {
    if text.is_empty() {
        Err(EntryError::Empty)
    } else if text.chars().any(char::is_whitespace) {
        Err(EntryError::Whitespace)
    } else if text.contains('%') {
        Err(EntryError::Zone)
    } else {
        Ok(())
    }
}

fn parse_range(start: &str, end: &str) -> Result<AddrRange, EntryError> {
    let start = address(start, || EntryError::RangeStart(shorten(start)))?;
    let end = address(end, || EntryError::RangeEnd(shorten(end)))?;
    if Family::of(start) != Family::of(end) {
        return Err(EntryError::RangeMixedFamilies);
    }
    AddrRange::new(start, end).ok_or(EntryError::RangeEndBeforeStart)
}

fn parse_cidr_range(addr: &str, len: &str) -> Result<AddrRange, EntryError> {
    let (ip, prefix) = cidr_parts(addr, len)?;
    let (family, value) = to_bits(ip);
    let mask = host_mask(family, prefix);
    Ok(AddrRange::from_bits(family, value & !mask, value | mask))
}

fn cidr_parts(addr: &str, len: &str) -> Result<(IpAddr, u8), EntryError> {
    let ip = address(addr, || EntryError::CidrAddress(shorten(addr)))?;
    let max = Family::of(ip).bits();
    let prefix = parse_prefix_length(len, max).ok_or_else(|| EntryError::CidrLength {
        len: shorten(len),
        max,
    })?;
    Ok((ip, prefix))
}

/// A decimal prefix length without sign or leading zeros (as Go's `netip.ParsePrefix`), at most
/// `max`.
fn parse_prefix_length(text: &str, max: u8) -> Option<u8> {
    let canonical = !text.is_empty()
        && text.len() <= 3
        && text.bytes().all(|b| b.is_ascii_digit())
        && (text == "0" || !text.starts_with('0'));
    if !canonical {
        return None;
    }
    text.parse::<u8>().ok().filter(|&len| len <= max)
}
