//! The shared conformance suite, run against the embedded engine: one fresh engine in its own
//! temporary directory per case.

use sluice_conformance::TestEngine;
use sluice_embedded::{EmbeddedEngine, EmbeddedOptions};
use std::sync::Arc;

async fn make() -> TestEngine {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("temporary directory: {e}"));
    let engine = EmbeddedEngine::open(dir.path(), EmbeddedOptions::default())
        .unwrap_or_else(|e| panic!("open the embedded engine: {e}"));
    TestEngine {
        engine: Arc::new(engine),
        // Removed after the engine (the suite drops the guard last).
        guard: Box::new(dir),
    }
}

sluice_conformance::engine_suite!(make);
