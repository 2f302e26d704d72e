//! Table tests of the filter-policy language, one module per operator or concern. Expected
//! outcomes follow AWS's documented SNS behaviour and AWS-recorded outcomes; every case also
//! checks that `explain_*` agrees with `matches_*`.

mod anything_but;
mod attribute_types;
mod body_structure;
mod cidr;
mod cost;
mod exact;
mod exists;
mod explain;
mod numeric;
mod or;
mod string_operators;
mod support;
mod validation;
