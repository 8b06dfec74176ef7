//! The tests on the plain test control plane (etcd, kube-apiserver, the garbage-collector and
//! namespace controllers; `inpool_testenv::support::env`, started once for this binary), plus
//! the tests that run control planes of their own to restart or reshape them (`api_server`,
//! `migration`, `pools`). Each test works in a namespace of its own, with an in-process controller
//! for that namespace when it needs one: nothing here acts cluster-wide (the `inpool` processes,
//! which do, are in `tests/process`). The test control plane's own tests are the bench's
//! (`testenv/tests/bench/`).

#[path = "../data/pools/corpus.rs"]
mod corpus;

mod api_server;
mod carved_pools;
mod kubectl_plugin;
mod migration;
mod pools;
mod pre_allocations;
mod prefix_pools;
mod spec_agreement;
mod subnets;
