//! The shared conformance suite with payload spill on, against one 3-master Redis Cluster and
//! one S3-compatible server (moto's), each shared by every case of this binary.

mod engines;

sluice_conformance::engine_suite!(
    engines::cluster,
    spill_to = sluice_conformance::spill::s3_store
);
