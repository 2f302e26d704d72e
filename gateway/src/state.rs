//! What every handler shares: the services and the token verifier.

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
}
