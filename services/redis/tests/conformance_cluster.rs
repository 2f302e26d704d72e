//! The shared conformance suite against one 3-master Redis Cluster shared by every case of
//! this binary; each case gets its own engine under its own key prefix.

mod engines;

sluice_conformance::engine_suite!(engines::cluster);
