//! The tests on the plain test control plane (etcd, kube-apiserver, the garbage-collector and
//! namespace controllers; `inpool_testenv::support::env`, started once for this binary), plus
//! the tests that run control planes of their own to restart or reshape them (`migration`,
//! `control_plane`, `pools`). Each test works in a namespace of its own.

#[path = "../data/pools/corpus.rs"]
mod corpus;

mod api_server;
mod binary;
mod control_plane;
mod diagnostics;
mod kubectl_plugin;
mod migration;
mod packaging;
mod pools;
mod prefix_pools;
mod scale_out;
mod service_account;
