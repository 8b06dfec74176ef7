//! The tests beside Cluster API itself: CAPI core v1.14.2's manager, with its webhooks in the path
//! of every request (`inpool_testenv::support::capi_env`, started once for this binary), and
//! clusterctl v1.14.2 on control planes of its own.

mod claims;
mod clusterctl;
mod upgrade;
mod v1beta1;
