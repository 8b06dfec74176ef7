//! The tests that need no control plane: the allocators against naive models (property tests),
//! inpool's API types and generated CRDs, the operations files checked by promtool, the kustomize
//! base and its optional components, the functions docs/architecture.md names, docs/conformance.md's
//! check-by-check table of the committed conformance reports, and the release's workflows, plugin
//! archive and krew manifest.

#[path = "../data/pools/corpus.rs"]
mod corpus;
mod props;

mod allocator_props;
mod api_schema;
mod architecture;
mod components;
mod conformance_table;
mod kustomize;
mod operations;
mod prefix_allocator_props;
mod release;
