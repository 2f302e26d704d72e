//! Black-box end-to-end tests: each starts the real `sluice` binary on a free port with its
//! own data folder and talks to it over HTTP, as a user would.

mod admin_and_auth;
mod aws_identity;
mod aws_limits;
mod aws_sns;
mod aws_sqs;
mod aws_terraform_v6;
mod bad_input;
mod config;
mod connections;
mod dead_letters;
mod dev_aws_key;
mod disk_failure;
mod fifo;
mod filter_cost;
mod harness;
mod metrics;
mod openapi;
mod overload;
mod payload_gc;
mod payloads;
mod queues_and_messages;
mod ratelimit;
mod readme;
mod redis;
mod restart;
mod stored_bytes;
mod tenants;
mod topics;
