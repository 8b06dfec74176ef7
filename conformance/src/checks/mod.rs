//! The checks, one module per profile. Each profile runs as one scenario: a sequence of steps on
//! objects of its own, each check ending as soon as what it tests has been seen.

pub mod concurrency;
pub mod core;
pub mod lifecycle;
pub mod moves;
pub mod ready;
