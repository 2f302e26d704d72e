//! The shared conformance suite with payload spill on, against the embedded engine: bodies
//! over the suite's low threshold go to a local payload folder and the engine keeps only
//! references. One fresh engine and one fresh folder per case.

mod engines;

sluice_conformance::engine_suite!(
    engines::embedded,
    spill_to = sluice_conformance::spill::local_store
);
