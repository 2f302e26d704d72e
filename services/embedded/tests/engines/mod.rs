//! The engine factory the conformance suites of this crate share (plain and with spill).

use sluice_conformance::TestEngine;
use sluice_embedded::{EmbeddedEngine, EmbeddedOptions};
use std::sync::Arc;

/// A fresh embedded engine in its own temporary directory.
pub(crate) async fn embedded() -> TestEngine {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("temporary directory: {e}"));
    let engine = EmbeddedEngine::open(dir.path(), EmbeddedOptions::default())
        .unwrap_or_else(|e| panic!("open the embedded engine: {e}"));
    TestEngine {
        engine: Arc::new(engine),
        // Removed after the engine (the suite drops the guard last).
        guard: Box::new(dir),
    }
}
