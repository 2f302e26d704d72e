//! The AWS-compatible endpoint's identity slice against the real binary: tenants' AWS account
//! ids, access keys through the admin API, and STS `GetCallerIdentity` signed by AWS's own
//! SigV4 signer (`aws-sigv4`), by boto3 and by the aws CLI when they are installed.

use crate::harness::{assert_error, token, Server};
use aws_credential_types::Credentials;
use aws_sigv4::http_request::{sign, SignableBody, SignableRequest, SigningSettings};
use aws_sigv4::sign::v4;
use reqwest::Method;
use serde_json::{json, Value};
use std::collections::HashSet;
use std::time::{Duration, SystemTime};

const FORM: &str = "application/x-www-form-urlencoded; charset=utf-8";
const GET_CALLER_IDENTITY: &str = "Action=GetCallerIdentity&Version=2011-06-15";

pub(crate) fn admin() -> String {
    token(None, "admin")
}

pub(crate) async fn create_tenant(server: &Server, body: Value) -> (u16, Value) {
    server
        .call(Method::POST, "/v1/admin/tenants", &admin(), Some(body))
        .await
}

pub(crate) async fn create_key(server: &Server, tenant: &str, body: Value) -> (u16, Value) {
    server
        .call(
            Method::POST,
            &format!("/v1/admin/tenants/{tenant}/access-keys"),
            &admin(),
            Some(body),
        )
        .await
}

pub(crate) fn account_of(tenant: &Value) -> String {
    let id = tenant["aws_account_id"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    assert!(
        id.len() == 12 && id.bytes().all(|b| b.is_ascii_digit()),
        "{tenant}"
    );
    id
}

/// An AWS answer: status, the `x-amzn-requestid` header and the XML text.
pub(crate) struct AwsAnswer {
    pub(crate) status: u16,
    pub(crate) request_id: Option<String>,
    pub(crate) headers: reqwest::header::HeaderMap,
    pub(crate) text: String,
}

impl AwsAnswer {
    /// The text of the first `<name>` element.
    pub(crate) fn element(&self, name: &str) -> Option<&str> {
        let open = format!("<{name}>");
        let start = self.text.find(&open)? + open.len();
        let end = self.text[start..].find(&format!("</{name}>"))? + start;
        Some(&self.text[start..end])
    }

    #[track_caller]
    pub(crate) fn assert_error(&self, status: u16, code: &str) {
        assert_eq!(self.status, status, "{}", self.text);
        assert_eq!(self.element("Code"), Some(code), "{}", self.text);
        assert!(self.text.starts_with("<?xml"), "{}", self.text);
        assert!(self.element("RequestId").is_some(), "{}", self.text);
    }
}

/// `POST /` with `body`, signed as an AWS SDK signs it (`aws-sigv4`) for `service` at `time`.
pub(crate) async fn signed_post(
    server: &Server,
    (key_id, secret): (&str, &str),
    service: &str,
    body: &str,
    time: SystemTime,
) -> AwsAnswer {
    signed_request(
        server,
        (key_id, secret),
        service,
        "/",
        &[("content-type", FORM)],
        body,
        time,
    )
    .await
}

/// `POST {path}` with `headers` and `body`, signed as an AWS SDK signs it (`aws-sigv4`) for
/// `service` at `time`.
pub(crate) async fn signed_request(
    server: &Server,
    key: (&str, &str),
    service: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &str,
    time: SystemTime,
) -> AwsAnswer {
    let signature = signature_headers(server, key, service, path, headers, body, time);
    let mut request = server.client.post(server.url(path)).body(body.to_owned());
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    for (name, value) in signature {
        request = request.header(name, value);
    }
    send(request).await
}

/// The headers `aws-sigv4` adds to sign `POST {path}` with `headers` (and `host`) and `body`
/// for `service` at `time`.
pub(crate) fn signature_headers(
    server: &Server,
    (key_id, secret): (&str, &str),
    service: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &str,
    time: SystemTime,
) -> Vec<(String, String)> {
    let host = server.base.trim_start_matches("http://").to_owned();
    let mut signed_headers = vec![("host", host.as_str())];
    signed_headers.extend_from_slice(headers);
    let identity = Credentials::new(key_id, secret, None, None, "e2e").into();
    let params = v4::SigningParams::builder()
        .identity(&identity)
        .region("us-east-1")
        .name(service)
        .time(time)
        .settings(SigningSettings::default())
        .build()
        .unwrap()
        .into();
    let signable = SignableRequest::new(
        "POST",
        server.url(path),
        signed_headers.iter().copied(),
        SignableBody::Bytes(body.as_bytes()),
    )
    .unwrap();
    let (instructions, _) = sign(signable, &params).unwrap().into_parts();
    instructions
        .headers()
        .map(|(name, value)| (name.to_owned(), value.to_owned()))
        .collect()
}

async fn send(request: reqwest::RequestBuilder) -> AwsAnswer {
    let response = request.send().await.unwrap();
    let status = response.status().as_u16();
    let request_id = response
        .headers()
        .get("x-amzn-requestid")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let headers = response.headers().clone();
    AwsAnswer {
        status,
        request_id,
        headers,
        text: response.text().await.unwrap(),
    }
}

#[tokio::test]
async fn tenants_get_unique_account_ids_given_or_assigned() {
    let server = Server::start();
    let mut seen = HashSet::new();
    for n in 0..20 {
        let (status, tenant) = create_tenant(&server, json!({"id": format!("acct-{n}")})).await;
        assert_eq!(status, 201, "{tenant}");
        let id = account_of(&tenant);
        assert_ne!(id, "000000000000");
        assert!(seen.insert(id), "account ids repeat: {seen:?}");
        // The same id when read back, alone or listed.
        let (status, read) = server
            .call(
                Method::GET,
                &format!("/v1/admin/tenants/acct-{n}"),
                &admin(),
                None,
            )
            .await;
        assert_eq!(status, 200);
        assert_eq!(read["aws_account_id"], tenant["aws_account_id"]);
    }
    let (status, list) = server
        .call(Method::GET, "/v1/admin/tenants?limit=100", &admin(), None)
        .await;
    assert_eq!(status, 200);
    let listed: HashSet<String> = list["tenants"]
        .as_array()
        .unwrap()
        .iter()
        .map(account_of)
        .collect();
    assert_eq!(listed, seen);

    // Given: kept; taken: 409; malformed: 400 naming the field.
    let (status, given) = create_tenant(
        &server,
        json!({"id": "given", "aws_account_id": "123456789012"}),
    )
    .await;
    assert_eq!(status, 201, "{given}");
    assert_eq!(given["aws_account_id"], "123456789012");
    let taken = create_tenant(
        &server,
        json!({"id": "again", "aws_account_id": "123456789012"}),
    )
    .await;
    assert_error(&taken, 409, "Conflict");
    assert!(taken.1["error"]["message"]
        .as_str()
        .unwrap()
        .contains("aws_account_id"));
    let (status, _) = server
        .call(Method::GET, "/v1/admin/tenants/again", &admin(), None)
        .await;
    assert_eq!(status, 404, "a refused creation creates nothing");
    let reserved = create_tenant(
        &server,
        json!({"id": "again", "aws_account_id": "000000000000"}),
    )
    .await;
    assert_error(&reserved, 409, "Conflict");
    for bad in [
        json!("12345"),
        json!("1234567890123"),
        json!("12345678901x"),
        json!(123456789012u64),
    ] {
        let answer = create_tenant(&server, json!({"id": "bad", "aws_account_id": bad})).await;
        assert_eq!(answer.0, 400, "{bad}: {}", answer.1);
        assert!(
            answer.1["error"]["message"]
                .as_str()
                .unwrap()
                .contains("aws_account_id"),
            "{}",
            answer.1
        );
    }
    // An existing tenant id with a free account id: the tenant conflict, and the id stays free.
    let dup = create_tenant(
        &server,
        json!({"id": "given", "aws_account_id": "210987654321"}),
    )
    .await;
    assert_error(&dup, 409, "Conflict");
    let (status, _) = create_tenant(
        &server,
        json!({"id": "later", "aws_account_id": "210987654321"}),
    )
    .await;
    assert_eq!(status, 201);

    // Deleting a tenant releases its id.
    let (status, _) = server
        .call(Method::DELETE, "/v1/admin/tenants/given", &admin(), None)
        .await;
    assert_eq!(status, 204);
    let (status, reused) = create_tenant(
        &server,
        json!({"id": "successor", "aws_account_id": "123456789012"}),
    )
    .await;
    assert_eq!(status, 201, "{reused}");
}

#[tokio::test]
async fn default_and_token_named_tenants_get_account_ids_on_first_need() {
    let server = Server::start();
    // Named by tokens only: the tenants exist once a token has been used.
    for tenant in ["default", "by-token"] {
        let (status, _) = server
            .call(
                Method::GET,
                "/v1/queues",
                &crate::harness::tenant_token(tenant),
                None,
            )
            .await;
        assert_eq!(status, 200);
    }
    let (status, default) = server
        .call(Method::GET, "/v1/admin/tenants/default", &admin(), None)
        .await;
    assert_eq!(status, 200, "{default}");
    assert_eq!(default["aws_account_id"], "000000000000");
    let (_, first) = server
        .call(Method::GET, "/v1/admin/tenants/by-token", &admin(), None)
        .await;
    let id = account_of(&first);
    let (_, second) = server
        .call(Method::GET, "/v1/admin/tenants/by-token", &admin(), None)
        .await;
    assert_eq!(second["aws_account_id"], id.as_str(), "assigned once");
}

#[tokio::test]
async fn access_keys_are_created_imported_listed_without_secrets_and_revoked() {
    let server = Server::start();
    assert_eq!(create_tenant(&server, json!({"id": "keys"})).await.0, 201);
    assert_eq!(create_tenant(&server, json!({"id": "other"})).await.0, 201);

    let (status, created) = create_key(&server, "keys", json!({"scopes": ["messages:send"]})).await;
    assert_eq!(status, 201, "{created}");
    let id = created["access_key_id"].as_str().unwrap().to_owned();
    let secret = created["secret_access_key"].as_str().unwrap().to_owned();
    assert!(id.starts_with("AKIA") && id.len() == 20, "{id}");
    assert!(id
        .bytes()
        .all(|b| b.is_ascii_uppercase() || b.is_ascii_digit()));
    assert_eq!(secret.len(), 40);
    assert_eq!(created["scopes"], json!(["messages:send"]));
    assert!(created["created_at"].as_str().unwrap().ends_with('Z'));

    let pair = json!({
        "scopes": ["queues:manage", "messages:consume"],
        "access_key_id": "AKIAIOSFODNN7EXAMPLE",
        "secret_access_key": "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
    });
    let (status, imported) = create_key(&server, "keys", pair.clone()).await;
    assert_eq!(status, 201, "{imported}");
    assert_eq!(imported["access_key_id"], "AKIAIOSFODNN7EXAMPLE");
    assert_eq!(
        imported["secret_access_key"],
        "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"
    );
    // Key ids are unique across tenants.
    assert_error(
        &create_key(&server, "keys", pair.clone()).await,
        409,
        "Conflict",
    );
    assert_error(&create_key(&server, "other", pair).await, 409, "Conflict");

    let (status, list) = server
        .call(
            Method::GET,
            "/v1/admin/tenants/keys/access-keys",
            &admin(),
            None,
        )
        .await;
    assert_eq!(status, 200);
    let keys = list["access_keys"].as_array().unwrap();
    let mut ids: Vec<&str> = keys
        .iter()
        .map(|k| k["access_key_id"].as_str().unwrap())
        .collect();
    let mut expected = vec![id.as_str(), "AKIAIOSFODNN7EXAMPLE"];
    ids.sort();
    expected.sort();
    assert_eq!(ids, expected);
    assert!(
        keys.iter().all(|k| k.get("secret_access_key").is_none()),
        "{list}"
    );
    assert!(!list.to_string().contains(&secret));
    let (_, others) = server
        .call(
            Method::GET,
            "/v1/admin/tenants/other/access-keys",
            &admin(),
            None,
        )
        .await;
    assert_eq!(others["access_keys"], json!([]));

    // Refused: admin, unknown or no scopes, half a pair, malformed pairs, unknown tenants.
    for (body, field) in [
        (json!({"scopes": ["admin"]}), "scopes[0]"),
        (json!({"scopes": ["messages:send", "nope"]}), "scopes[1]"),
        (json!({"scopes": []}), "scopes"),
        (
            json!({"scopes": ["messages:send"], "access_key_id": "AKIAIOSFODNN7EXAMPL2"}),
            "secret_access_key",
        ),
        (
            json!({"scopes": ["messages:send"], "secret_access_key": "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"}),
            "access_key_id",
        ),
        (
            json!({"scopes": ["messages:send"], "access_key_id": "akia-lower", "secret_access_key": "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"}),
            "access_key_id",
        ),
        (
            json!({"scopes": ["messages:send"], "access_key_id": "AKIAIOSFODNN7EXAMPL2", "secret_access_key": "short"}),
            "secret_access_key",
        ),
    ] {
        let answer = create_key(&server, "keys", body.clone()).await;
        assert_error(&answer, 400, "ValidationError");
        assert!(
            answer.1["error"]["message"]
                .as_str()
                .unwrap()
                .starts_with(field),
            "{body}: {}",
            answer.1
        );
    }
    assert_error(
        &create_key(&server, "ghost", json!({"scopes": ["messages:send"]})).await,
        404,
        "TenantNotFound",
    );
    let tenant_token = crate::harness::tenant_token("keys");
    let (status, _) = server
        .call(
            Method::POST,
            "/v1/admin/tenants/keys/access-keys",
            &tenant_token,
            Some(json!({"scopes": ["messages:send"]})),
        )
        .await;
    assert_eq!(status, 403, "only admins make keys");

    // Revoking: another tenant's key is not found; then the key goes, once.
    let path = format!("/v1/admin/tenants/other/access-keys/{id}");
    assert_error(
        &server.call(Method::DELETE, &path, &admin(), None).await,
        404,
        "AccessKeyNotFound",
    );
    let path = format!("/v1/admin/tenants/keys/access-keys/{id}");
    assert_eq!(
        server.call(Method::DELETE, &path, &admin(), None).await.0,
        204
    );
    assert_error(
        &server.call(Method::DELETE, &path, &admin(), None).await,
        404,
        "AccessKeyNotFound",
    );
    let (_, list) = server
        .call(
            Method::GET,
            "/v1/admin/tenants/keys/access-keys",
            &admin(),
            None,
        )
        .await;
    assert_eq!(list["access_keys"].as_array().unwrap().len(), 1, "{list}");
}

#[tokio::test]
async fn get_caller_identity_answers_the_keys_account() {
    let server = Server::start();
    let (_, tenant) = create_tenant(
        &server,
        json!({"id": "sts", "aws_account_id": "111122223333"}),
    )
    .await;
    assert_eq!(tenant["aws_account_id"], "111122223333");
    let (status, key) = create_key(&server, "sts", json!({"scopes": ["messages:send"]})).await;
    assert_eq!(status, 201);
    let id = key["access_key_id"].as_str().unwrap().to_owned();
    let secret = key["secret_access_key"].as_str().unwrap().to_owned();
    let now = SystemTime::now();

    let answer = signed_post(&server, (&id, &secret), "sts", GET_CALLER_IDENTITY, now).await;
    assert_eq!(answer.status, 200, "{}", answer.text);
    assert!(answer.text.contains(
        "<GetCallerIdentityResponse xmlns=\"https://sts.amazonaws.com/doc/2011-06-15/\">"
    ));
    assert_eq!(answer.element("Account"), Some("111122223333"));
    assert_eq!(
        answer.element("Arn"),
        Some(format!("arn:aws:iam::111122223333:user/{id}").as_str())
    );
    assert_eq!(answer.element("UserId"), Some(id.as_str()));
    assert_eq!(answer.element("RequestId"), answer.request_id.as_deref());

    // A wrong secret, an unknown key, a skewed clock.
    let wrong = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY";
    signed_post(&server, (&id, wrong), "sts", GET_CALLER_IDENTITY, now)
        .await
        .assert_error(403, "SignatureDoesNotMatch");
    signed_post(
        &server,
        ("AKIAUNKNOWNUNKNOWN00", wrong),
        "sts",
        GET_CALLER_IDENTITY,
        now,
    )
    .await
    .assert_error(403, "InvalidClientTokenId");
    let skewed = signed_post(
        &server,
        (&id, &secret),
        "sts",
        GET_CALLER_IDENTITY,
        now - Duration::from_secs(20 * 60),
    )
    .await;
    skewed.assert_error(403, "SignatureDoesNotMatch");
    assert!(skewed
        .element("Message")
        .unwrap()
        .starts_with("Signature expired"));

    // Other actions and services are not served.
    signed_post(
        &server,
        (&id, &secret),
        "sts",
        "Action=AssumeRole&Version=2011-06-15",
        now,
    )
    .await
    .assert_error(400, "InvalidAction");
    signed_post(
        &server,
        (&id, &secret),
        "dynamodb",
        "Action=ListTables&Version=2012-08-10",
        now,
    )
    .await
    .assert_error(400, "InvalidAction");
    // EC2 in its own error shape, which SDKs parse (and so do not retry): Terraform providers
    // before 4.0 ask EC2 for the account's platforms while configuring.
    let ec2 = signed_post(
        &server,
        (&id, &secret),
        "ec2",
        "Action=DescribeAccountAttributes&AttributeName.1=supported-platforms&Version=2016-11-15",
        now,
    )
    .await;
    assert_eq!(ec2.status, 400, "{}", ec2.text);
    assert!(
        ec2.text
            .contains("<Response><Errors><Error><Code>InvalidAction</Code>"),
        "{}",
        ec2.text
    );
    assert_eq!(
        ec2.element("RequestID"),
        ec2.request_id.as_deref(),
        "{}",
        ec2.text
    );

    // Unsigned Query requests are refused; anything else at `/` answers as before.
    send(
        server
            .client
            .post(server.url("/"))
            .header("content-type", FORM)
            .body(GET_CALLER_IDENTITY),
    )
    .await
    .assert_error(403, "MissingAuthenticationToken");
    let before = server
        .client
        .post(server.url("/"))
        .json(&json!({}))
        .send()
        .await
        .unwrap();
    assert_eq!(before.status(), 404);
    let before = server.client.get(server.url("/")).send().await.unwrap();
    assert_eq!(before.status(), 404);

    // A revoked key, and every key of a deleted tenant, are unknown.
    let path = format!("/v1/admin/tenants/sts/access-keys/{id}");
    assert_eq!(
        server.call(Method::DELETE, &path, &admin(), None).await.0,
        204
    );
    signed_post(&server, (&id, &secret), "sts", GET_CALLER_IDENTITY, now)
        .await
        .assert_error(403, "InvalidClientTokenId");
    let (_, key) = create_key(&server, "sts", json!({"scopes": ["messages:send"]})).await;
    let pair = (
        key["access_key_id"].as_str().unwrap().to_owned(),
        key["secret_access_key"].as_str().unwrap().to_owned(),
    );
    assert_eq!(
        signed_post(&server, (&pair.0, &pair.1), "sts", GET_CALLER_IDENTITY, now)
            .await
            .status,
        200
    );
    assert_eq!(
        server
            .call(Method::DELETE, "/v1/admin/tenants/sts", &admin(), None)
            .await
            .0,
        204
    );
    signed_post(&server, (&pair.0, &pair.1), "sts", GET_CALLER_IDENTITY, now)
        .await
        .assert_error(403, "InvalidClientTokenId");
}

/// Runs `program args` with the key in the environment; `None` if the program is missing.
/// `tests/run.sh` installs the tools into a virtual environment named by `SLUICE_TEST_AWS_BIN`,
/// where they must then be; otherwise the PATH's are used.
pub(crate) fn run_tool(
    program: &str,
    args: &[&str],
    (id, secret): (&str, &str),
) -> Option<std::process::Output> {
    run_tool_with(program, args, (id, secret), &[])
}

/// [`run_tool`] with more environment variables.
pub(crate) fn run_tool_with(
    program: &str,
    args: &[&str],
    (id, secret): (&str, &str),
    env: &[(&str, &str)],
) -> Option<std::process::Output> {
    let path = match std::env::var_os("SLUICE_TEST_AWS_BIN") {
        Some(dir) => {
            let path = std::path::Path::new(&dir).join(program);
            assert!(
                path.exists(),
                "SLUICE_TEST_AWS_BIN has no {program}: {path:?}"
            );
            path
        }
        None => std::path::PathBuf::from(program),
    };
    std::process::Command::new(path)
        .args(args)
        .env("AWS_ACCESS_KEY_ID", id)
        .env("AWS_SECRET_ACCESS_KEY", secret)
        .env("AWS_DEFAULT_REGION", "us-east-1")
        .env("AWS_EC2_METADATA_DISABLED", "true")
        .env_remove("AWS_SESSION_TOKEN")
        .env_remove("AWS_PROFILE")
        .env("AWS_CONFIG_FILE", "/dev/null")
        .env("AWS_SHARED_CREDENTIALS_FILE", "/dev/null")
        .envs(env.iter().copied())
        .output()
        .ok()
}

/// boto3 and the aws CLI, unchanged but for the endpoint URL: skipped (with a note) where
/// they are not installed, as `tests/run.sh` installs them.
#[tokio::test]
async fn boto3_and_the_aws_cli_get_the_caller_identity() {
    let server = Server::start();
    assert_eq!(create_tenant(&server, json!({"id": "boto"})).await.0, 201);
    let (_, tenant) = server
        .call(Method::GET, "/v1/admin/tenants/boto", &admin(), None)
        .await;
    let account = account_of(&tenant);
    let (_, key) = create_key(&server, "boto", json!({"scopes": ["messages:send"]})).await;
    let pair = (
        key["access_key_id"].as_str().unwrap().to_owned(),
        key["secret_access_key"].as_str().unwrap().to_owned(),
    );
    let endpoint = server.url("");
    let script = format!(
        "import boto3, json; print(json.dumps(boto3.client('sts', endpoint_url='{endpoint}').get_caller_identity()))"
    );
    let pair_ref = (pair.0.as_str(), pair.1.as_str());
    let tools: [(&str, Vec<&str>); 2] = [
        ("python3", vec!["-c", &script]),
        (
            "aws",
            vec![
                "sts",
                "get-caller-identity",
                "--endpoint-url",
                &endpoint,
                "--output",
                "json",
            ],
        ),
    ];
    for (program, args) in tools {
        let server_out = tokio::task::spawn_blocking({
            let args: Vec<String> = args.iter().map(|s| s.to_string()).collect();
            let pair = (pair_ref.0.to_owned(), pair_ref.1.to_owned());
            let program = program.to_owned();
            move || {
                let args: Vec<&str> = args.iter().map(String::as_str).collect();
                run_tool(&program, &args, (&pair.0, &pair.1))
            }
        })
        .await
        .unwrap();
        let Some(output) = server_out else {
            eprintln!("skipped: {program} is not installed");
            continue;
        };
        let stderr = String::from_utf8_lossy(&output.stderr);
        if !output.status.success() && stderr.contains("No module named 'boto3'") {
            eprintln!("skipped: boto3 is not installed");
            continue;
        }
        assert!(output.status.success(), "{program}: {stderr}");
        let answer: Value = serde_json::from_slice(&output.stdout).unwrap_or_else(|e| {
            panic!(
                "{program}: {e}: {}",
                String::from_utf8_lossy(&output.stdout)
            )
        });
        assert_eq!(answer["Account"], account.as_str(), "{program}: {answer}");
        assert_eq!(answer["UserId"], pair.0.as_str(), "{program}: {answer}");
        assert_eq!(
            answer["Arn"],
            format!("arn:aws:iam::{account}:user/{}", pair.0).as_str(),
            "{program}: {answer}"
        );
    }
}

/// On Redis, two gateways share account ids and keys: a key made through one signs requests
/// the other verifies, and ids assigned through both never repeat.
#[tokio::test]
async fn gateways_on_one_redis_share_account_ids_and_keys() {
    let redis = sluice_testkit::RedisServer::start().unwrap();
    let prefix = sluice_testkit::unique_prefix("e2e-aws");
    let start = || crate::harness::redis_gateway(&redis.url(), &prefix, &[]);
    let ((_a_dir, a), (_b_dir, b)) = (start(), start());
    let mut seen = HashSet::new();
    for n in 0..10 {
        let server = if n % 2 == 0 { &a } else { &b };
        let (status, tenant) = create_tenant(server, json!({"id": format!("r-{n}")})).await;
        assert_eq!(status, 201, "{tenant}");
        assert!(seen.insert(account_of(&tenant)));
    }
    let (_, read) = b
        .call(Method::GET, "/v1/admin/tenants/r-0", &admin(), None)
        .await;
    assert!(seen.contains(&account_of(&read)));
    let (status, key) = create_key(&a, "r-0", json!({"scopes": ["messages:send"]})).await;
    assert_eq!(status, 201);
    let pair = (
        key["access_key_id"].as_str().unwrap().to_owned(),
        key["secret_access_key"].as_str().unwrap().to_owned(),
    );
    let answer = signed_post(
        &b,
        (&pair.0, &pair.1),
        "sts",
        GET_CALLER_IDENTITY,
        SystemTime::now(),
    )
    .await;
    assert_eq!(answer.status, 200, "{}", answer.text);
    assert_eq!(answer.element("Account"), Some(account_of(&read).as_str()));
    let path = format!("/v1/admin/tenants/r-0/access-keys/{}", pair.0);
    assert_eq!(b.call(Method::DELETE, &path, &admin(), None).await.0, 204);
    signed_post(
        &a,
        (&pair.0, &pair.1),
        "sts",
        GET_CALLER_IDENTITY,
        SystemTime::now(),
    )
    .await
    .assert_error(403, "InvalidClientTokenId");
}

/// A gateway serves an access key from memory for up to a second after reading it
/// (`AWS_IDENTITY_TTL`): a key deleted through one gateway is refused there at once, and on
/// another gateway that had it in memory within about a second (awaited here with a bounded
/// number of attempts; the bound allows for a loaded test machine).
#[tokio::test]
async fn a_key_deleted_through_one_gateway_is_refused_on_every_gateway_within_a_second() {
    let redis = sluice_testkit::RedisServer::start().unwrap();
    let prefix = sluice_testkit::unique_prefix("e2e-aws-revoke");
    let start = || crate::harness::redis_gateway(&redis.url(), &prefix, &[]);
    let ((_a_dir, a), (_b_dir, b)) = (start(), start());
    assert_eq!(create_tenant(&a, json!({"id": "revoke"})).await.0, 201);
    let (status, key) = create_key(&a, "revoke", json!({"scopes": ["messages:send"]})).await;
    assert_eq!(status, 201, "{key}");
    let pair = (
        key["access_key_id"].as_str().unwrap().to_owned(),
        key["secret_access_key"].as_str().unwrap().to_owned(),
    );
    // Both gateways now hold the key in memory.
    assert_eq!(identify(&a, &pair).await.status, 200);
    assert_eq!(identify(&b, &pair).await.status, 200);
    let path = format!("/v1/admin/tenants/revoke/access-keys/{}", pair.0);
    assert_eq!(a.call(Method::DELETE, &path, &admin(), None).await.0, 204);
    let deleted = std::time::Instant::now();
    identify(&a, &pair)
        .await
        .assert_error(403, "InvalidClientTokenId");
    for attempt in 0.. {
        let answer = identify(&b, &pair).await;
        if answer.status == 403 {
            answer.assert_error(403, "InvalidClientTokenId");
            break;
        }
        assert_eq!(answer.status, 200, "{}", answer.text);
        assert!(
            attempt < 50 && deleted.elapsed() < Duration::from_millis(2500),
            "the other gateway still accepts the deleted key {:?} after its deletion",
            deleted.elapsed()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn identify(server: &Server, (id, secret): &(String, String)) -> AwsAnswer {
    signed_post(
        server,
        (id, secret),
        "sts",
        GET_CALLER_IDENTITY,
        SystemTime::now(),
    )
    .await
}
