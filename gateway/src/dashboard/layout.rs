//! The page shell every dashboard page shares (head, navigation, sign-out), the error page,
//! and small rendering helpers. maud escapes every interpolated string, so user-supplied text
//! (queue names, bodies, attributes, policies) always renders as text.

use super::assets;
use super::session::CSRF_FIELD;
use super::Session;
use axum::http::StatusCode;
use axum::response::{Html, IntoResponse, Response};
use maud::{html, Markup, DOCTYPE};

/// htmx's settings: no inline indicator styles (the CSP allows none), no `eval`, and error
/// answers swapped into their target like any other, so refusals show where the action was.
const HTMX_CONFIG: &str = r#"{"includeIndicatorStyles":false,"allowEval":false,"allowScriptTags":false,"responseHandling":[{"code":"204","swap":false},{"code":"[2345]..","swap":true,"error":false}]}"#;

/// Which section of the navigation a page belongs to.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Section {
    Queues,
    Topics,
    Admin,
}

/// A whole page for a signed-in session.
pub(super) fn page(session: &Session, section: Section, title: &str, body: Markup) -> Response {
    let nav = html! {
        nav aria-label="Sections" {
            a.brand href="/dashboard" { "Sluice" }
            @if session.tenant.is_some() {
                a href="/dashboard/queues" aria-current=[current(section, Section::Queues)] { "Queues" }
                a href="/dashboard/topics" aria-current=[current(section, Section::Topics)] { "Topics" }
            }
            @if session.admin {
                a href="/dashboard/admin" aria-current=[current(section, Section::Admin)] { "Admin" }
            }
            span.who {
                @match &session.tenant {
                    Some(tenant) => { "Tenant " strong { (tenant) } }
                    None => { "Administrator" }
                }
            }
            form.signout method="post" action="/dashboard/logout" {
                (csrf_field(session))
                button type="submit" { "Sign out" }
            }
        }
    };
    Html(shell(title, Some(nav), body).into_string()).into_response()
}

fn current(section: Section, this: Section) -> Option<&'static str> {
    (section == this).then_some("page")
}

/// The document around a page's content.
pub(super) fn shell(title: &str, nav: Option<Markup>, body: Markup) -> Markup {
    html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                meta name="htmx-config" content=(HTMX_CONFIG);
                meta name="referrer" content="same-origin";
                title { (title) " · Sluice" }
                link rel="stylesheet" href=(assets::url("app.css"));
                link rel="stylesheet" href=(assets::url("uplot.min.css"));
                script defer src=(assets::url("htmx.min.js")) {}
                script defer src=(assets::url("htmx-ext-sse.min.js")) {}
                script defer src=(assets::url("uplot.min.js")) {}
                script defer src=(assets::url("app.js")) {}
            }
            body {
                a.skip href="#main" { "Skip to content" }
                @if let Some(nav) = nav { header { (nav) } }
                main #main tabindex="-1" {
                    h1 { (title) }
                    (body)
                }
                footer {
                    "Sluice dashboard · third-party licences: "
                    a href=(assets::url("htmx.LICENSE")) { "htmx" } ", "
                    a href=(assets::url("htmx-ext-sse.LICENSE")) { "htmx SSE" } ", "
                    a href=(assets::url("uplot.LICENSE")) { "uPlot" }
                }
            }
        }
    }
}

/// An error answer: a short page whose body htmx swaps into an action's result area, or a
/// page of its own on a navigation.
pub(super) fn error_page(status: StatusCode, code: &str, message: &str) -> Response {
    let alert = html! {
        div.alert.error role="alert" {
            strong { (code) } ": " (message)
        }
    };
    if super::is_htmx() {
        return (status, Html(alert.into_string())).into_response();
    }
    let body = html! { (alert) p { a href="/dashboard" { "Back to the dashboard" } } };
    (status, Html(shell("Error", None, body).into_string())).into_response()
}

/// An action's answer: a fragment for htmx, or the same in a page of its own.
pub(super) fn outcome(status: StatusCode, fragment: Markup) -> Response {
    if super::is_htmx() {
        (status, Html(fragment.into_string())).into_response()
    } else {
        let body = html! { (fragment) p { a href="/dashboard" { "Back to the dashboard" } } };
        (status, Html(shell("Done", None, body).into_string())).into_response()
    }
}

/// A success notice.
pub(super) fn notice(message: Markup) -> Markup {
    html! { div.alert.ok role="status" { (message) } }
}

/// The hidden CSRF field every state-changing form carries.
pub(super) fn csrf_field(session: &Session) -> Markup {
    html! { input type="hidden" name=(CSRF_FIELD) value=(session.csrf); }
}

/// A count with thousands separators.
pub(super) fn count(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// A duration in seconds, briefly (`3 s`, `4 min`, `2 h`, `5 d`).
pub(super) fn age(seconds: Option<u64>) -> String {
    match seconds {
        None => "—".into(),
        Some(s) if s < 120 => format!("{s} s"),
        Some(s) if s < 7200 => format!("{} min", s / 60),
        Some(s) if s < 172_800 => format!("{} h", s / 3600),
        Some(s) => format!("{} d", s / 86_400),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_and_ages_read_well() {
        assert_eq!(count(0), "0");
        assert_eq!(count(999), "999");
        assert_eq!(count(1000), "1,000");
        assert_eq!(count(1234567), "1,234,567");
        assert_eq!(age(None), "—");
        assert_eq!(age(Some(59)), "59 s");
        assert_eq!(age(Some(600)), "10 min");
        assert_eq!(age(Some(7200)), "2 h");
        assert_eq!(age(Some(3 * 86_400)), "3 d");
    }

    #[test]
    fn interpolated_text_is_escaped() {
        let hostile = "<script>alert(1)</script>\"'&";
        let markup = html! { td title=(hostile) { (hostile) } }.into_string();
        assert!(!markup.contains("<script>"), "{markup}");
        assert!(markup.contains("&lt;script&gt;"), "{markup}");
        assert!(!markup.contains("title=\"<"), "{markup}");
    }
}
