//! The shared conformance suite with payload spill on, against one standalone `redis-server`
//! and one S3-compatible server (moto's), each shared by every case of this binary: bodies
//! over the suite's low threshold go to S3 and Redis keeps only references.

mod engines;

sluice_conformance::engine_suite!(
    engines::standalone,
    spill_to = sluice_conformance::spill::s3_store
);
