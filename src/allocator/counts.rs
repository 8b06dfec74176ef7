//! Pool usage counters, exact in `u128`, and their saturating conversion for the status fields.

/// Exact usage counts of one pool.
///
/// `used` counts every address the allocator knows to be in use, inside the pool or not, like
/// the reference's `used` (one per IPAddress of the pool). Unlike the reference, `free` only
/// subtracts the used addresses that are inside the pool, so it is exact:
/// `free + (used - out_of_range) == total`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Counts {
    /// Allocatable addresses in the pool. For the whole IPv6 space (2^128) this reads
    /// `u128::MAX`; no valid pool spec can produce that set.
    pub total: u128,
    /// Addresses in use, in the pool or out of range.
    pub used: u128,
    /// Pool addresses not in use.
    pub free: u128,
    /// Used addresses that are not in the pool (any more).
    pub out_of_range: u128,
}

impl Counts {
    /// Used addresses inside the pool.
    pub fn used_in_pool(self) -> u128 {
        self.used - self.out_of_range.min(self.used)
    }

    /// The counts as the CRD's `status.ipAddresses` integers (`type: integer`, a Go `int`, so
    /// 64-bit), each saturating at `i64::MAX` as the reference's `math.MaxInt`.
    pub fn to_status(self) -> StatusCounts {
        StatusCounts {
            total: saturating_i64(self.total),
            used: saturating_i64(self.used),
            free: saturating_i64(self.free),
            out_of_range: saturating_i64(self.out_of_range),
        }
    }
}

/// [`Counts`] as written to `status.ipAddresses` (`total`, `used`, `free`, `outOfRange`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct StatusCounts {
    pub total: i64,
    pub used: i64,
    pub free: i64,
    pub out_of_range: i64,
}

/// `value` as `i64`, or `i64::MAX` if it does not fit.
pub fn saturating_i64(value: u128) -> i64 {
    i64::try_from(value).unwrap_or(i64::MAX)
}

/// `value` as `i32`, or `i32::MAX` if it does not fit (for `int32` fields).
pub fn saturating_i32(value: u128) -> i32 {
    i32::try_from(value).unwrap_or(i32::MAX)
}
