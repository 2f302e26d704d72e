//! The dashboard's static files, embedded in the binary: the vendored htmx, its SSE extension
//! and uPlot (with their licences, under `gateway/assets/dashboard/vendor/`), and our own CSS
//! and script. Served with their content type and a year-long immutable cache: every URL
//! carries a digest of the build's assets, so a new build is a new URL.

use axum::extract::Path;
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use sha2::{Digest, Sha256};
use std::sync::LazyLock;

/// One embedded file.
struct Asset {
    name: &'static str,
    content_type: &'static str,
    bytes: &'static [u8],
}

macro_rules! asset {
    ($name:literal, $path:literal, $type:expr) => {
        Asset {
            name: $name,
            content_type: $type,
            bytes: include_bytes!(concat!(
                env!("CARGO_MANIFEST_DIR"),
                "/assets/dashboard/",
                $path
            )),
        }
    };
}

const JS: &str = "text/javascript; charset=utf-8";
const CSS: &str = "text/css; charset=utf-8";
const TEXT: &str = "text/plain; charset=utf-8";

static ASSETS: [Asset; 9] = [
    asset!("app.css", "app.css", CSS),
    asset!("app.js", "app.js", JS),
    asset!("htmx.min.js", "vendor/htmx-2.0.11.min.js", JS),
    asset!(
        "htmx-ext-sse.min.js",
        "vendor/htmx-ext-sse-2.2.4.min.js",
        JS
    ),
    asset!("uplot.min.js", "vendor/uplot-1.6.32.iife.min.js", JS),
    asset!("uplot.min.css", "vendor/uplot-1.6.32.min.css", CSS),
    asset!("htmx.LICENSE", "vendor/htmx.LICENSE", TEXT),
    asset!("htmx-ext-sse.LICENSE", "vendor/htmx-ext-sse.LICENSE", TEXT),
    asset!("uplot.LICENSE", "vendor/uplot.LICENSE", TEXT),
];

/// A digest of every asset, in their URLs: `/dashboard/assets/<version>/<name>`.
pub(super) static VERSION: LazyLock<String> = LazyLock::new(|| {
    let mut digest = Sha256::new();
    for asset in &ASSETS {
        digest.update(asset.name.as_bytes());
        digest.update(asset.bytes);
    }
    hex::encode(&digest.finalize()[..6])
});

/// The URL of the asset called `name`.
pub(super) fn url(name: &str) -> String {
    format!("/dashboard/assets/{}/{name}", *VERSION)
}

/// `GET /dashboard/assets/{version}/{name}`. An old version's URL still answers (with the
/// current file) but is not cached, so a page rendered before an upgrade keeps working.
pub(super) async fn serve(Path((version, name)): Path<(String, String)>) -> Response {
    let Some(asset) = ASSETS.iter().find(|a| a.name == name) else {
        return (StatusCode::NOT_FOUND, "no such asset").into_response();
    };
    let cache = if version == *VERSION {
        "public, max-age=31536000, immutable"
    } else {
        "no-cache"
    };
    let mut response = asset.bytes.into_response();
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static(asset.content_type),
    );
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static(cache));
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_asset_has_the_content_type_of_its_extension() {
        for asset in &ASSETS {
            let expected = match asset.name.rsplit('.').next() {
                Some("js") => JS,
                Some("css") => CSS,
                _ => TEXT,
            };
            assert_eq!(asset.content_type, expected, "{}", asset.name);
            assert!(!asset.bytes.is_empty(), "{}", asset.name);
        }
    }
}
