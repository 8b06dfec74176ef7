//! What the property tests of the two allocators share.

use proptest::prelude::*;

/// 256 cases, or `PROPTEST_CASES` for a deeper search; no regression files next to the
/// sources: a failure prints its minimal input instead.
pub fn config() -> ProptestConfig {
    ProptestConfig {
        cases: std::env::var("PROPTEST_CASES")
            .ok()
            .and_then(|n| n.parse().ok())
            .unwrap_or(256),
        failure_persistence: None,
        ..ProptestConfig::default()
    }
}

/// Strings made of the characters that matter to the parser, strings shaped like the entries
/// (`entries`, regular expressions), and any string at all.
pub fn spec_like_string(entries: [&'static str; 2]) -> impl Strategy<Value = String> {
    prop_oneof![
        "[0-9a-fA-F:./%-]{0,45}",
        entries[0],
        entries[1],
        any::<String>(),
    ]
}
