//! The tests that need no control plane: the allocators against naive models (property tests),
//! inpool's API types and generated CRDs, and the operations files checked by promtool.

#[path = "../data/pools/corpus.rs"]
mod corpus;
mod props;

mod allocator_props;
mod api_schema;
mod operations;
mod prefix_allocator_props;
