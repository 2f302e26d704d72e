//! The web dashboard at `/dashboard`: server-rendered pages (maud) over the same services and
//! the same REST handlers as `/v1`, so it holds no queue semantics and no scope rules of its
//! own — every page and action authorises through the `Caller` of the session's bearer token,
//! exactly as the API does. Owns the session (the token in an `HttpOnly` cookie, CSRF and
//! origin checks, in `session.rs`), the security headers every answer carries, the embedded
//! assets (`assets.rs`) and one module per page.

mod admin;
mod assets;
mod fields;
mod history;
mod layout;
mod overview;
mod queue;
mod redrive;
pub mod session;
mod signin;
mod topics;

use crate::auth::Scope;
use crate::caller::Caller;
use crate::error::ApiError;
use crate::state::AppState;
use axum::body::Body;
use axum::extract::{FromRequestParts, Request, State};
use axum::http::{header, request::Parts, HeaderValue, Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::{get, post};
use axum::Router;
use futures_util::{Stream, StreamExt};
use session::CsrfKey;
use sluice_services::Services;

/// The dashboard router's state: the application's, this process's CSRF key and the charts'
/// counts history.
#[derive(Clone)]
pub struct DashState {
    app: AppState,
    csrf: CsrfKey,
    history: std::sync::Arc<history::History>,
}

/// The largest form the dashboard reads: a message body at the server's largest size, with
/// room for its URL encoding.
const MAX_FORM_BYTES: usize = 3 * 1024 * 1024;

/// The dashboard's routes, under `/dashboard`, with the CSRF key every gateway sharing the
/// JWT secret derives from it (so a form one gateway rendered is accepted by another behind
/// the same load balancer); a random one of this process when tokens are verified with a
/// public key.
pub fn router(app: AppState) -> Router {
    let key = session::csrf_key_of(&app.auth);
    router_with_key(app, key)
}

/// [`router`] with a given CSRF key.
pub fn router_with_key(app: AppState, csrf: CsrfKey) -> Router {
    let history = std::sync::Arc::new(history::History::default());
    // Held weakly by the services: the sampler stops feeding it when this router is dropped.
    let observer: std::sync::Arc<dyn sluice_services::QueueObserver> = history.clone();
    app.services.observe_queues(&observer);
    let state = DashState { app, csrf, history };
    Router::new()
        .route("/dashboard", get(home))
        .route("/dashboard/", get(home))
        .route("/dashboard/assets/{version}/{name}", get(assets::serve))
        .route("/dashboard/login", get(signin::form).post(signin::sign_in))
        .route("/dashboard/logout", post(signin::sign_out))
        .route("/dashboard/queues", get(overview::page))
        .route("/dashboard/queues/{queue}", get(queue::page))
        .route("/dashboard/queues/{queue}/live", get(queue::live))
        .route("/dashboard/queues/{queue}/history", get(queue::history))
        .route("/dashboard/queues/{queue}/dead-letters", get(redrive::page))
        .route("/dashboard/queues/{queue}/send", post(queue::send))
        .route("/dashboard/queues/{queue}/purge", post(queue::purge))
        .route("/dashboard/queues/{queue}/settings", post(queue::settings))
        .route("/dashboard/queues/{queue}/redrive", post(redrive::start))
        .route("/dashboard/redrive/{id}/live", get(redrive::live))
        .route("/dashboard/redrive/{id}/cancel", post(redrive::cancel))
        .route("/dashboard/topics", get(topics::list))
        .route("/dashboard/topics/{topic}", get(topics::page))
        .route(
            "/dashboard/topics/{topic}/subscribe",
            post(topics::subscribe),
        )
        .route("/dashboard/topics/{topic}/test", post(topics::test_policy))
        .route(
            "/dashboard/subscriptions/{id}/delete",
            post(topics::unsubscribe),
        )
        .route("/dashboard/admin", get(admin::page))
        .route("/dashboard/admin/tenants", post(admin::create_tenant))
        .route("/dashboard/admin/tokens", post(admin::mint))
        .route_layer(axum::middleware::from_fn_with_state(state.clone(), guard))
        .layer(axum::middleware::from_fn(security_headers))
        .with_state(state)
}

/// `GET /dashboard`: the caller's first page.
async fn home(session: Result<Session, DashError>) -> Response {
    match session {
        Ok(session) if session.tenant.is_some() => {
            Redirect::to("/dashboard/queues").into_response()
        }
        Ok(_) => Redirect::to("/dashboard/admin").into_response(),
        Err(_) => Redirect::to("/dashboard/login").into_response(),
    }
}

/// Refuses every state-changing request that is not from one of our pages: it must come from
/// this origin and, once signed in, carry the CSRF token of its session (a form field, or the
/// `x-csrf-token` header). Sign-in itself has no session yet: the origin check covers it.
async fn guard(State(state): State<DashState>, request: Request, next: Next) -> Response {
    if matches!(*request.method(), Method::GET | Method::HEAD) {
        return next.run(request).await;
    }
    if let Err(why) = session::same_origin(request.headers()) {
        return DashError::Csrf(why.into()).into_response();
    }
    if request.uri().path() == "/dashboard/login" {
        return next.run(request).await;
    }
    let Some(token) = session::session_token(request.headers()) else {
        return DashError::SignIn.into_response();
    };
    let header_csrf = request
        .headers()
        .get(session::CSRF_HEADER)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let (parts, body) = request.into_parts();
    // Read within the gateway's body budget, as every body is.
    let bytes = match crate::body_budget::read_body(
        &parts.headers,
        &parts.extensions,
        body,
        MAX_FORM_BYTES,
        &state.app.body_budget,
    )
    .await
    {
        Ok(bytes) => axum::body::Bytes::from(bytes),
        Err(error) => return DashError::Api(ApiError::from(error)).into_response(),
    };
    let given = header_csrf.or_else(|| session::form_csrf(&bytes));
    match given {
        Some(given) if state.csrf.verify(&token, &given) => {
            next.run(Request::from_parts(parts, Body::from(bytes)))
                .await
        }
        Some(_) => {
            DashError::Csrf("the form's CSRF token is not this session's".into()).into_response()
        }
        None => DashError::Csrf("the form carries no CSRF token".into()).into_response(),
    }
}

/// The Content-Security-Policy: our own scripts, styles and connections only, no inline
/// script or style, no framing, forms posting only here.
const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; \
    connect-src 'self'; font-src 'self'; form-action 'self'; frame-ancestors 'none'; \
    base-uri 'none'";

/// Adds the security headers to every dashboard answer, and keeps pages (which hold queue
/// contents) out of caches; assets set their own caching.
async fn security_headers(request: Request, next: Next) -> Response {
    let htmx = request.headers().contains_key("hx-request");
    let mut response = HTMX.scope(htmx, next.run(request)).await;
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(CSP),
    );
    headers.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    // `same-origin`, not `no-referrer`: the latter would make browsers send `Origin: null`
    // on form posts, which the origin check refuses.
    headers.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("same-origin"),
    );
    headers
        .entry(header::CACHE_CONTROL)
        .or_insert(HeaderValue::from_static("no-store"));
    response
}

/// The signed-in caller of a dashboard request: the `Caller` of the session's token (verified
/// and rate-limited as on `/v1`), and what the pages need to show.
pub struct Session {
    caller: Caller,
    /// This session's CSRF token, for the forms of the page.
    csrf: String,
    /// The tenant the token acts for; `None` for admin tokens.
    tenant: Option<String>,
    /// Whether the token holds `admin`.
    admin: bool,
}

impl Session {
    fn caller(&self) -> Caller {
        self.caller.clone()
    }
}

impl FromRequestParts<DashState> for Session {
    type Rejection = DashError;

    async fn from_request_parts(
        parts: &mut Parts,
        state: &DashState,
    ) -> Result<Self, Self::Rejection> {
        let token = session::session_token(&parts.headers).ok_or(DashError::SignIn)?;
        // The API's own extractor reads the bearer header: the cookie stands in for it, and
        // any header the client sent is replaced, so the cookie is the only credential here.
        let bearer =
            HeaderValue::from_str(&format!("Bearer {token}")).map_err(|_| DashError::SignIn)?;
        parts.headers.insert(header::AUTHORIZATION, bearer);
        let caller = match Caller::from_request_parts(parts, &state.app).await {
            Ok(caller) => caller,
            Err(ApiError::Unauthenticated(_)) => return Err(DashError::SignIn),
            Err(other) => return Err(DashError::Api(other)),
        };
        let tenant = caller
            .tenant_with_any(&Scope::ALL)
            .ok()
            .map(|t| t.as_str().to_owned());
        let admin = caller.require_admin().is_ok();
        Ok(Session {
            caller,
            csrf: state.csrf.token_for(&token),
            tenant,
            admin,
        })
    }
}

tokio::task_local! {
    /// Whether the request being served was made by htmx: its answers, errors included, are
    /// fragments for the element that asked. Set by [`security_headers`].
    static HTMX: bool;
}

/// Whether the request being served was made by htmx.
fn is_htmx() -> bool {
    HTMX.try_with(|htmx| *htmx).unwrap_or(false)
}

/// What a dashboard request can fail with.
#[derive(Debug, thiserror::Error)]
pub enum DashError {
    /// No session, or its token no longer verifies: sign in (again).
    #[error("sign in")]
    SignIn,
    /// A state-changing request that failed the origin or CSRF check.
    #[error("{0}")]
    Csrf(String),
    /// What the API would answer.
    #[error(transparent)]
    Api(#[from] ApiError),
}

impl From<sluice_services::ServiceError> for DashError {
    fn from(error: sluice_services::ServiceError) -> Self {
        DashError::Api(error.into())
    }
}

impl IntoResponse for DashError {
    fn into_response(self) -> Response {
        match self {
            // htmx cannot see a redirect its request followed: it gets a 401 naming where to go.
            DashError::SignIn if is_htmx() => (
                StatusCode::UNAUTHORIZED,
                [("hx-redirect", HeaderValue::from_static("/dashboard/login"))],
            )
                .into_response(),
            DashError::SignIn => Redirect::to("/dashboard/login").into_response(),
            DashError::Csrf(why) => layout::error_page(
                StatusCode::FORBIDDEN,
                "Forbidden",
                &format!("Refused: {why}. Reload the page and try again."),
            ),
            DashError::Api(error) => {
                let (status, code, _) = error.classify();
                error.log(&crate::error::current_request_id());
                layout::error_page(status, code, &error.public_message())
            }
        }
    }
}

/// A page's or action's answer.
type Answer = Result<Response, DashError>;

/// Ends a live stream (SSE) as soon as the server begins stopping: an open page would otherwise
/// keep its connection, and so the stop, waiting until the stream's own end half an hour later.
/// The page's script reconnects, to another gateway or to this one restarted.
fn until_stopping<S: Stream>(stream: S, services: Services) -> impl Stream<Item = S::Item> {
    stream.take_until(async move { services.stopped().await })
}
