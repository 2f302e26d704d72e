//! The `sluice` binary: `serve` runs the service, `token` mints a token.

use clap::Parser;
use sluice_engine::TenantId;
use sluice_gateway::auth::{Auth, Scope};
use sluice_gateway::config::{Cli, Command, Settings, TokenArgs};
use sluice_gateway::startup::Application;
use std::process::ExitCode;

const DEV_TOKEN_TTL_SECONDS: u64 = 30 * 24 * 3600;

#[tokio::main]
async fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("SLUICE_LOG")
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        .init();
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Serve(args) => serve(&args).await,
        Command::Token(args) => token(&args),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("sluice: {message}");
            ExitCode::FAILURE
        }
    }
}

fn now_seconds() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

async fn serve(args: &sluice_gateway::config::CommonArgs) -> Result<(), String> {
    let settings = Settings::resolve(args).map_err(|e| e.to_string())?;
    let app = Application::build(&settings)
        .await
        .map_err(|e| e.to_string())?;
    let addr = app.local_addr().map_err(|e| e.to_string())?;
    println!("sluice listening on http://{addr}");
    if settings.is_development() {
        print_development_tokens(&app, addr, &settings)?;
    }
    app.run_until_stopped().await.map_err(|e| e.to_string())
}

fn print_development_tokens(
    app: &Application,
    addr: std::net::SocketAddr,
    settings: &Settings,
) -> Result<(), String> {
    let auth = &app.state().auth;
    let now = now_seconds();
    let admin = auth.mint(None, &[Scope::Admin], now, DEV_TOKEN_TTL_SECONDS)?;
    let tenant = TenantId::parse("default").map_err(|e| e.to_string())?;
    let tenant_scopes: Vec<Scope> = Scope::ALL
        .into_iter()
        .filter(|s| *s != Scope::Admin)
        .collect();
    let user = auth.mint(Some(&tenant), &tenant_scopes, now, DEV_TOKEN_TTL_SECONDS)?;
    println!(
        "development mode: signing key kept in {}/jwt-secret; tokens below last 30 days\n\
         admin token:            {admin}\n\
         tenant 'default' token: {user}\n\
         try:\n  \
         export TOKEN={user}\n  \
         curl -s -X PUT http://{addr}/v1/queues/orders -H \"Authorization: Bearer $TOKEN\"\n  \
         curl -s -X POST http://{addr}/v1/queues/orders/messages -H \"Authorization: Bearer $TOKEN\" -H 'content-type: application/json' -d '{{\"body\": \"hello\"}}'\n  \
         curl -s -X POST http://{addr}/v1/queues/orders/messages/receive -H \"Authorization: Bearer $TOKEN\"\n\
         API reference: http://{addr}/docs/",
        settings.data_dir.display()
    );
    Ok(())
}

fn token(args: &TokenArgs) -> Result<(), String> {
    let settings = Settings::resolve(&args.common).map_err(|e| e.to_string())?;
    let auth = Auth::new(
        settings.key_material(),
        settings.issuer.clone(),
        settings.audience.clone(),
    )?;
    let mut scopes = Vec::new();
    // The server splits the claim on ASCII spaces only; split the same way so that what is
    // refused here is exactly what the server would not grant.
    for name in args.scopes.split(' ').filter(|name| !name.is_empty()) {
        scopes.push(Scope::parse(name).ok_or_else(|| format!("scopes: unknown scope {name:?}"))?);
    }
    let tenant = match &args.tenant {
        Some(id) => Some(TenantId::parse(id).map_err(|e| format!("tenant: {e}"))?),
        None => None,
    };
    if tenant.is_none() && !scopes.contains(&Scope::Admin) {
        return Err("tenant: a token without --tenant must carry the admin scope".into());
    }
    if tenant.is_some() && scopes.contains(&Scope::Admin) {
        return Err(
            "scopes: admin cannot be combined with --tenant (admin tokens name no tenant; omit --tenant for an admin token)"
                .into(),
        );
    }
    println!(
        "{}",
        auth.mint(tenant.as_ref(), &scopes, now_seconds(), args.ttl_seconds)?
    );
    Ok(())
}
