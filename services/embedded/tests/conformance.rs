//! The shared conformance suite, run against the embedded engine: one fresh engine in its own
//! temporary directory per case.

mod engines;

sluice_conformance::engine_suite!(engines::embedded);
