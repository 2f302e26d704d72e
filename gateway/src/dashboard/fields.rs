//! Reading the dashboard's forms: every field as text, parsed here with errors that name the
//! field in the API's own `ValidationError` shape, so a bad form answers a clear 400.

use super::DashError;
use axum::extract::{FromRequest, Request};
use axum::Form;
use sluice_services::ServiceError;
use std::collections::BTreeMap;
use std::str::FromStr;

/// A submitted form's fields.
pub(super) struct Fields(BTreeMap<String, String>);

impl<S: Send + Sync> FromRequest<S> for Fields {
    type Rejection = DashError;

    async fn from_request(request: Request, state: &S) -> Result<Self, Self::Rejection> {
        let Form(map) = Form::<BTreeMap<String, String>>::from_request(request, state)
            .await
            .map_err(|e| DashError::from(ServiceError::invalid("form", e.body_text())))?;
        Ok(Fields(map))
    }
}

impl Fields {
    /// The field's text, trimmed; empty when absent.
    pub(super) fn text(&self, name: &str) -> &str {
        self.0.get(name).map(|v| v.trim()).unwrap_or("")
    }

    /// The field's text as given (bodies keep their whitespace); empty when absent.
    pub(super) fn raw(&self, name: &str) -> &str {
        self.0.get(name).map(String::as_str).unwrap_or("")
    }

    /// The field's text, `None` when empty.
    pub(super) fn optional(&self, name: &str) -> Option<String> {
        Some(self.text(name))
            .filter(|v| !v.is_empty())
            .map(str::to_owned)
    }

    /// A whole number, `None` when empty.
    pub(super) fn number<T: FromStr>(&self, name: &str) -> Result<Option<T>, ServiceError> {
        match self.text(name) {
            "" => Ok(None),
            text => text.parse().map(Some).map_err(|_| {
                ServiceError::invalid(name, format!("must be a whole number, got {text:?}"))
            }),
        }
    }

    /// Whether a checkbox is ticked.
    pub(super) fn checked(&self, name: &str) -> bool {
        matches!(self.text(name), "on" | "true" | "1")
    }

    /// A JSON value, `None` when empty.
    pub(super) fn json<T: serde::de::DeserializeOwned>(
        &self,
        name: &str,
    ) -> Result<Option<T>, ServiceError> {
        match self.text(name) {
            "" => Ok(None),
            text => serde_json::from_str(text).map(Some).map_err(|e| {
                ServiceError::invalid(
                    name,
                    format!("is not valid JSON of the expected shape: {e}"),
                )
            }),
        }
    }
}
