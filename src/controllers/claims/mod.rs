//! Claims: the `IPAddressClaim` reconciler and what it reads.
//!
//! - [`controller`]: the claim controller, fed by the claim watch;
//! - [`reconcile`]: the claim's lifecycle, performing the steps [`state::plan`] decides against
//!   the API server, with a `Ready` condition that tells the truth about every claim;
//! - [`messages`]: what the claim's condition and Events say, and what they tell the user to do;
//! - [`cache`]: the claim cache the claim watch keeps, which the claim controller reads;
//! - [`cached_claim`]: what that cache keeps of each claim;
//! - [`own_writes`]: which cached claim versions inpool's own writes have replaced.
//!
//! [`state::plan`]: crate::controllers::state::plan
pub(crate) mod cache;
pub(crate) mod cached_claim;
pub(crate) mod controller;
pub(crate) mod messages;
pub(crate) mod own_writes;
pub(crate) mod reconcile;
