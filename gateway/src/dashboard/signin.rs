//! Signing in with a bearer token (a tenant's or an admin's, as the API accepts) and signing
//! out. The token is checked by the API's own `Caller` extractor, then kept only in the
//! `HttpOnly` session cookie: never in a URL, never in a page.

use super::layout::shell;
use super::session;
use super::DashState;
use crate::caller::Caller;
use crate::error::ApiError;
use axum::extract::{FromRequestParts, State};
use axum::http::{header, HeaderMap, HeaderValue, Request, StatusCode};
use axum::response::{Html, IntoResponse, Redirect, Response};
use axum::Form;
use maud::{html, Markup};
use serde::Deserialize;

fn login_page(problem: Option<&str>) -> Markup {
    let body = html! {
        @if let Some(problem) = problem {
            div.alert.error role="alert" { (problem) }
        }
        form.card.signin method="post" action="/dashboard/login" {
            p { "Paste a bearer token: a tenant's, to see its queues and topics, or an \
                 administrator's, for tenants and tokens. It is kept in a cookie this page's \
                 scripts cannot read, and sent only to this server." }
            label for="token" { "Token" }
            input #token type="password" name="token" autocomplete="off" required
                autofocus spellcheck="false";
            button type="submit" { "Sign in" }
        }
    };
    shell("Sign in", None, body)
}

/// `GET /dashboard/login`.
pub(super) async fn form() -> Html<String> {
    Html(login_page(None).into_string())
}

/// The sign-in form.
#[derive(Deserialize)]
pub(super) struct SignIn {
    token: String,
}

/// `POST /dashboard/login`: verifies the token as the API would and stores it in the cookie.
pub(super) async fn sign_in(
    State(state): State<DashState>,
    headers: HeaderMap,
    Form(form): Form<SignIn>,
) -> Response {
    let token = form.token.trim();
    let token = token.strip_prefix("Bearer ").unwrap_or(token).trim();
    let refuse = |status: StatusCode, why: &str| {
        (status, Html(login_page(Some(why)).into_string())).into_response()
    };
    let Ok(bearer) = HeaderValue::from_str(&format!("Bearer {token}")) else {
        return refuse(StatusCode::BAD_REQUEST, "token: not a bearer token");
    };
    let Ok(request) = Request::builder()
        .uri("/dashboard/login")
        .header(header::AUTHORIZATION, bearer)
        .body(())
    else {
        return refuse(StatusCode::BAD_REQUEST, "token: not a bearer token");
    };
    let (mut parts, ()) = request.into_parts();
    match Caller::from_request_parts(&mut parts, &state.app).await {
        Ok(_) => {}
        Err(error @ ApiError::Unauthenticated(_)) => {
            return refuse(
                StatusCode::UNAUTHORIZED,
                &format!("token: {}", error.public_message()),
            );
        }
        Err(error) => return super::DashError::Api(error).into_response(),
    }
    let Some(cookie) = session::set_cookie(token, session::over_tls(&headers)) else {
        return refuse(StatusCode::BAD_REQUEST, "token: not a bearer token");
    };
    let mut response = Redirect::to("/dashboard").into_response();
    response.headers_mut().insert(header::SET_COOKIE, cookie);
    response
}

/// `POST /dashboard/logout`: clears the cookie (the guard checked the CSRF token).
pub(super) async fn sign_out(headers: HeaderMap) -> Response {
    let mut response = Redirect::to("/dashboard/login").into_response();
    response.headers_mut().insert(
        header::SET_COOKIE,
        session::clear_cookie(session::over_tls(&headers)),
    );
    response
}
