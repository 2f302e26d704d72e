//! What every handler shares: the services, the token verifier, the in-flight bound and the
//! body budget.

use crate::auth::Auth;
use sluice_services::Services;
use std::sync::Arc;

/// The router's state. Cheap to clone.
#[derive(Clone)]
pub struct AppState {
    /// The protocol-agnostic services.
    pub services: Services,
    /// Token verification (and minting, when a signing key is configured).
    pub auth: Arc<Auth>,
    /// One permit per `/v1` request in progress, up to `max_in_flight_requests`.
    pub in_flight: Arc<tokio::sync::Semaphore>,
    /// The bytes request bodies may hold at once (`--max-body-bytes-in-flight`).
    pub body_budget: crate::body_budget::BodyBudget,
    /// The base of the queue URLs the AWS endpoint answers (`--public-url`).
    pub public_url: Arc<String>,
}
