//! The scale harness (`cargo run --release --example scale`) and its correctness check at a small
//! size (`tests/`): the engine, the scenarios at size, the API server's request counts and the
//! provider as a process. The example adds the command line and the report.
//!
//! - [`harness`]: the floor (an ideal provider that only writes), the provider scenarios (N
//!   claims in M pools against a provider process), the Ready tracker and the end-of-run check;
//! - [`atsize`]: restart, idle and trickle at size;
//! - [`apimetrics`]: requests counted from the API server's own `/metrics`;
//! - [`process`]: the provider under test as a process, with its resource use from `/proc`.

pub mod apimetrics;
pub mod atsize;
pub mod harness;
pub mod process;
