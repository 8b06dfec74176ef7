//! The scale harness (`cargo run --release --bin scale`) and its correctness check at a small
//! size (`tests/`): the engine, the scenarios at size, the API server's request counts and the
//! provider as a process. The binary (`src/bin/scale/`) adds the command line and the report.
//!
//! - [`harness`]: the floor (an ideal provider that only writes), the provider scenarios (N
//!   claims in M pools against a provider process), the Ready tracker and the end-of-run check;
//! - [`atsize`]: restart, idle and trickle at size;
//! - [`foreign`]: what claims of another provider's pools cost inpool;
//! - [`apimetrics`]: requests counted from the API server's own `/metrics`;
//! - [`process`]: the provider under test as a process, with its resource use from `/proc`;
//! - [`soak`]: what the soak run (`src/bin/soak.rs`) computes: slopes, duplicates, its picture.

pub mod apimetrics;
pub mod atsize;
pub mod foreign;
pub mod harness;
pub mod process;
pub mod soak;

/// The harness binaries' `main`: runs `run` on a multi-threaded runtime; success when it returns
/// `Ok(true)`, failure (with the error printed) otherwise.
pub fn main(
    run: impl std::future::Future<Output = anyhow::Result<bool>>,
) -> std::process::ExitCode {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("tokio runtime");
    match runtime.block_on(run) {
        Ok(true) => std::process::ExitCode::SUCCESS,
        Ok(false) => std::process::ExitCode::FAILURE,
        Err(e) => {
            eprintln!("error: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}
