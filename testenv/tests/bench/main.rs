//! The test bench's own tests: the test control plane behaves like a real cluster
//! (`control_plane`), and the fault proxy holds, answers and cuts as told (`fault_proxy`).
//!
//! They run on one plain control plane (`inpool_testenv::support::env`, started once for this
//! binary), each test in a namespace of its own; the restart test runs a control plane of its own.

mod control_plane;
mod fault_proxy;
