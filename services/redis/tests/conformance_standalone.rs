//! The shared conformance suite against one standalone `redis-server` shared by every case of
//! this binary; each case gets its own engine under its own key prefix.

mod engines;

sluice_conformance::engine_suite!(engines::standalone);
