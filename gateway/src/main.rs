//! The `sluice` binary: `serve` runs the service (in development mode it also prints tokens and
//! the `default` tenant's AWS key pair), `token` mints a token.

use clap::Parser;
use hmac::{Hmac, KeyInit, Mac};
use sha2::Sha256;
use sluice_engine::TenantId;
use sluice_gateway::auth::{Auth, KeyMaterial, Scope};
use sluice_gateway::config::{Cli, Command, Settings, TokenArgs};
use sluice_gateway::startup::Application;
use sluice_services::{AccessKey, ServiceError};
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
        print_development_tokens(&app, addr, &settings).await?;
    }
    app.run_until_stopped().await.map_err(|e| e.to_string())
}

async fn print_development_tokens(
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
         API reference: http://{addr}/docs/\n\
         dashboard:     http://{addr}/dashboard (sign in with a token above)",
        settings.data_dir.display()
    );
    match development_access_key(app, settings, &tenant, &tenant_scopes).await {
        Ok((key_id, secret, account)) => println!(
            "AWS access key of tenant 'default' (account {account}), the same on every start with this data folder:\n  \
             export AWS_ACCESS_KEY_ID={key_id} AWS_SECRET_ACCESS_KEY={secret} AWS_DEFAULT_REGION={region}\n  \
             aws --endpoint-url http://{addr} sqs create-queue --queue-name orders\n  \
             aws --endpoint-url http://{addr} sqs list-queues",
            region = settings.aws_region
        ),
        // The REST tokens above still work; the server need not stop for this.
        Err(message) => eprintln!("sluice: no development AWS access key: {message}"),
    }
    Ok(())
}

/// The development AWS key pair of the `default` tenant, stored through the access-key
/// service if it is not yet. Both halves are derived from the development signing key (an
/// HMAC of it under fixed labels), so every start with the same data folder prints, and stores,
/// the same pair instead of piling up a new key per start; a revoked pair comes back at the
/// next start.
async fn development_access_key(
    app: &Application,
    settings: &Settings,
    tenant: &TenantId,
    scopes: &[Scope],
) -> Result<(String, String, String), String> {
    let KeyMaterial::Secret(signing_key) = settings.key_material() else {
        return Err("development mode has no generated signing key".into());
    };
    let derive = |label: &str, alphabet: &[u8], len: usize| -> String {
        let mut out = String::with_capacity(len);
        for block in 0u8.. {
            let mut mac = <Hmac<Sha256> as KeyInit>::new_from_slice(signing_key.expose())
                .unwrap_or_else(|_| unreachable!("HMAC takes keys of any length"));
            mac.update(label.as_bytes());
            mac.update(&[block]);
            for byte in mac.finalize().into_bytes() {
                if out.len() == len {
                    return out;
                }
                // Both alphabets have a power-of-two length: every character is as likely.
                out.push(char::from(alphabet[usize::from(byte) % alphabet.len()]));
            }
        }
        out
    };
    let key_id = format!(
        "AKIA{}",
        derive(
            "sluice development AWS access key id",
            b"ABCDEFGHIJKLMNOPQRSTUVWXYZ234567",
            16
        )
    );
    let secret = derive(
        "sluice development AWS secret access key",
        b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/",
        40,
    );
    let services = &app.state().services;
    let stored = |key: Option<AccessKey>| {
        key.is_some_and(|k| k.tenant == *tenant && k.secret_access_key == secret)
    };
    let account = |key_id: String, secret: String| async move {
        let account = services
            .tenant_account_id(tenant)
            .await
            .map_err(|e| e.to_string())?;
        Ok::<_, String>((key_id, secret, account))
    };
    if stored(
        services
            .access_key(&key_id)
            .await
            .map_err(|e| e.to_string())?,
    ) {
        return account(key_id, secret).await;
    }
    services
        .ensure_tenant(tenant, Some(now_seconds()))
        .await
        .map_err(|e| e.to_string())?;
    let created = services
        .create_access_key(
            tenant.as_str(),
            &key_id,
            &secret,
            scopes.iter().map(|s| s.as_str().to_owned()).collect(),
        )
        .await;
    match created {
        Ok(_) => account(key_id, secret).await,
        // Another gateway on the same store stored it meanwhile.
        Err(ServiceError::Conflict(_))
            if stored(
                services
                    .access_key(&key_id)
                    .await
                    .map_err(|e| e.to_string())?,
            ) =>
        {
            account(key_id, secret).await
        }
        Err(e) => Err(e.to_string()),
    }
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
