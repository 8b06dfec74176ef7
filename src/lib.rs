//! inpool: a Cluster API IPAM provider that hands out addresses from in-cluster pools.
#![forbid(unsafe_code)]
