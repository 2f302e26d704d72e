//! [`Secret`]: the one way a secret (the JWT signing secret; store credentials later) is held.
//! Its `Debug` never shows the value, so deriving `Debug` on a settings struct, or logging one,
//! cannot leak it; reading the value takes an explicit [`Secret::expose`].

use serde::Deserialize;
use std::fmt;

/// A value that must not appear in `Debug` output or logs.
#[derive(Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(transparent)]
pub struct Secret<T>(T);

impl<T> Secret<T> {
    /// Wraps `value`.
    pub fn new(value: T) -> Self {
        Secret(value)
    }

    /// The value, for the one place that needs it (a key constructor, a connection string).
    pub fn expose(&self) -> &T {
        &self.0
    }

    /// Unwraps the value.
    pub fn into_exposed(self) -> T {
        self.0
    }
}

impl<T> fmt::Debug for Secret<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Secret(<redacted>)")
    }
}

/// Lets clap read a flag or environment variable straight into a `Secret`.
impl From<String> for Secret<String> {
    fn from(value: String) -> Self {
        Secret(value)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_redacts_the_value() {
        let secret = Secret::new("hunter2-hunter2".to_owned());
        let shown = format!("{secret:?} {:?} {secret:#?}", Some(&secret));
        assert!(!shown.contains("hunter2"), "{shown}");
        assert_eq!(secret.expose(), "hunter2-hunter2");
    }
}
