//! The HTTP gateway: auth, tenancy, REST v1, OpenAPI and the API reference, over the
//! protocol-agnostic services. Handlers are thin; the `sluice` binary is `main.rs`.

pub mod app;
pub mod auth;
pub mod aws;
pub mod body_budget;
pub mod caller;
pub mod config;
pub mod dashboard;
pub mod dto;
pub mod error;
pub mod extract;
pub mod metrics;
pub mod routes;
pub mod secret;
pub mod serve;
pub mod startup;
pub mod state;
