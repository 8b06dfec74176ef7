//! The `inpool` binary as a process, cluster-wide as deployed, on a plain test control plane of
//! this binary's own (`inpool_testenv::support::env`): the process and leader election
//! (`binary`), the release binary as the image runs it (`image`), secure `/metrics` and a real
//! Prometheus scrape (`diagnostics`), Cluster API's controller-runtime dashboard and inpool's own
//! over inpool's metrics (`dashboard`, `inpool_dashboard`), the rendered components and their
//! RBAC (`packaging`), real claims as the ServiceAccount (`service_account`) and two processes
//! sharing the claims (`scale_out`), a second IPAM provider beside inpool (`second_writer`),
//! what a tenant with claim rights can reach (`tenancy`), and a burst throttled by API Priority
//! and Fairness (`throttled`).
//!
//! A bed of its own: a process that runs the controllers cluster-wide acts on every namespace's
//! pools and claims, so it must not share a control plane with tests that expect only their own
//! controller there. The tests here take turns (`one_inpool_test_at_a_time`).

mod binary;
mod dashboard;
mod diagnostics;
mod image;
mod inpool_dashboard;
mod packaging;
mod scale_out;
mod second_writer;
mod service_account;
mod tenancy;
mod throttled;
