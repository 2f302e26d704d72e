//! The SQS-compatible endpoint against the real binary: boto3 (AWS JSON 1.0) over every action
//! (`aws_sqs_boto3.py`, which checks SQS's MD5s computed independently), the aws CLI, the Rust
//! SDK, the Query protocol as older SDKs speak it (requests signed by AWS's own signer,
//! `aws-sigv4`), messages crossing between SQS and REST with the same digests, tenant
//! isolation, key scopes and malformed requests.

use crate::aws_identity::{
    account_of, create_key, create_tenant, run_tool_with, signed_request, AwsAnswer,
};
use crate::harness::{tenant_token, Server};
use reqwest::Method;
use serde_json::{json, Value};
use std::time::SystemTime;

const FORM: &str = "application/x-www-form-urlencoded; charset=utf-8";
const JSON: &str = "application/x-amz-json-1.0";
pub(crate) const ALL_QUEUE_SCOPES: [&str; 3] =
    ["queues:manage", "messages:send", "messages:consume"];

/// A tenant with an access key, on a running server.
pub(crate) struct Tenant {
    id: String,
    account: String,
    key: (String, String),
}

impl Tenant {
    pub(crate) async fn create(server: &Server, id: &str, scopes: &[&str]) -> Tenant {
        Tenant::create_with(server, json!({ "id": id }), scopes).await
    }

    /// A tenant made from `body` (`{"id", "quotas"?}`).
    async fn create_with(server: &Server, body: Value, scopes: &[&str]) -> Tenant {
        let id = body["id"].as_str().unwrap().to_owned();
        let id = id.as_str();
        let (status, tenant) = create_tenant(server, body).await;
        assert_eq!(status, 201, "{tenant}");
        let (status, key) = create_key(server, id, json!({ "scopes": scopes })).await;
        assert_eq!(status, 201, "{key}");
        Tenant {
            id: id.to_owned(),
            account: account_of(&tenant),
            key: (
                key["access_key_id"].as_str().unwrap().to_owned(),
                key["secret_access_key"].as_str().unwrap().to_owned(),
            ),
        }
    }

    fn pair(&self) -> (&str, &str) {
        (&self.key.0, &self.key.1)
    }

    pub(crate) fn queue_url(&self, server: &Server, queue: &str) -> String {
        format!("{}/{}/{queue}", server.base, self.account)
    }

    /// A Query-protocol request (`Action=...&Version=2012-11-05`) to `path`.
    async fn query(&self, server: &Server, path: &str, params: &[(&str, &str)]) -> AwsAnswer {
        let body = form_urlencoded::Serializer::new(String::new())
            .extend_pairs(params)
            .finish();
        signed_request(
            server,
            self.pair(),
            "sqs",
            path,
            &[("content-type", FORM)],
            &body,
            SystemTime::now(),
        )
        .await
    }

    /// A JSON-protocol request for `action`.
    async fn json(&self, server: &Server, action: &str, body: &str) -> AwsAnswer {
        let target = format!("AmazonSQS.{action}");
        signed_request(
            server,
            self.pair(),
            "sqs",
            "/",
            &[("content-type", JSON), ("x-amz-target", &target)],
            body,
            SystemTime::now(),
        )
        .await
    }
}

impl AwsAnswer {
    fn json(&self) -> Value {
        serde_json::from_str(&self.text).unwrap_or_else(|e| panic!("{e}: {}", self.text))
    }

    /// A JSON-protocol error: status, `__type`, and the `x-amzn-query-error` header's code.
    #[track_caller]
    fn assert_json_error(&self, status: u16, shape: &str, query_code: &str) {
        assert_eq!(self.status, status, "{}", self.text);
        assert_eq!(self.json()["__type"], shape, "{}", self.text);
        let header = self
            .headers
            .get("x-amzn-query-error")
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default();
        assert!(
            header.starts_with(&format!("{query_code};")),
            "{header:?}: {}",
            self.text
        );
        assert!(self.request_id.is_some());
    }

    /// Every text of `<name>` elements, in order.
    fn elements(&self, name: &str) -> Vec<String> {
        let open = format!("<{name}>");
        let close = format!("</{name}>");
        self.text
            .split(&open)
            .skip(1)
            .filter_map(|rest| rest.split(&close).next().map(str::to_owned))
            .collect()
    }
}

async fn rest_receive(server: &Server, tenant: &str, queue: &str) -> Value {
    let (status, received) = server
        .call(
            Method::POST,
            &format!("/v1/queues/{queue}/messages/receive"),
            &tenant_token(tenant),
            Some(json!({"max_messages": 10, "wait_seconds": 1})),
        )
        .await;
    assert_eq!(status, 200, "{received}");
    received
}

/// Runs `aws_sqs_boto3.py` with `python` against a fresh server: every check of the script
/// must pass. `None` when `python` or its boto3 is missing.
async fn run_boto3_checks(python: String) -> Option<String> {
    let server = Server::start();
    let tenant = Tenant::create(&server, "boto-sqs", &ALL_QUEUE_SCOPES).await;
    let other = Tenant::create(&server, "boto-other", &ALL_QUEUE_SCOPES).await;
    other
        .query(
            &server,
            "/",
            &[("Action", "CreateQueue"), ("QueueName", "theirs")],
        )
        .await;
    let other_url = other.queue_url(&server, "theirs");
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/../tests/e2e/aws_sqs_boto3.py");
    let endpoint = server.base.clone();
    let output = tokio::task::spawn_blocking({
        let pair = tenant.key.clone();
        let account = tenant.account.clone();
        move || {
            run_tool_with(
                &python,
                &[script],
                (&pair.0, &pair.1),
                &[
                    ("SLUICE_ENDPOINT", &endpoint),
                    ("SLUICE_ACCOUNT", &account),
                    ("SLUICE_OTHER_QUEUE_URL", &other_url),
                ],
            )
        }
    })
    .await
    .unwrap()?;
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&output.stderr);
    if !output.status.success() && stderr.contains("No module named 'boto3'") {
        return None;
    }
    println!("{stdout}");
    assert!(output.status.success(), "{stdout}\n{stderr}");
    assert!(stdout.contains("passed; 0 failed"), "{stdout}");
    // The other tenant's queue is untouched by everything the script tried on it.
    let (status, _) = server
        .call(
            Method::GET,
            "/v1/queues/theirs",
            &tenant_token(&other.id),
            None,
        )
        .await;
    assert_eq!(status, 200);
    Some(stdout)
}

/// boto3 with a current botocore (AWS JSON 1.0) over every action (the script's checks),
/// skipped with a note where boto3 is not installed, as `tests/run.sh` installs it.
#[tokio::test]
async fn boto3_drives_every_sqs_action() {
    match run_boto3_checks("python3".into()).await {
        Some(out) => assert!(out.contains("(json protocol)"), "{out}"),
        None => eprintln!("skipped: python3 or boto3 is not installed"),
    }
}

/// The same checks with a botocore older than 1.31, which speaks SQS's Query protocol (XML
/// answers), as the SDKs and tools of before 2023 do. `tests/run.sh` installs it in its own
/// virtual environment and names it in `SLUICE_TEST_AWS_QUERY_BIN`; without it the test is
/// skipped with a note.
#[tokio::test]
async fn boto3_over_the_query_protocol_drives_every_sqs_action() {
    let Some(dir) = std::env::var_os("SLUICE_TEST_AWS_QUERY_BIN") else {
        eprintln!("skipped: SLUICE_TEST_AWS_QUERY_BIN is not set");
        return;
    };
    let python = std::path::Path::new(&dir).join("python3");
    assert!(
        python.exists(),
        "SLUICE_TEST_AWS_QUERY_BIN has no python3: {python:?}"
    );
    let out = run_boto3_checks(python.to_string_lossy().into_owned())
        .await
        .expect("the Query-protocol venv has boto3");
    assert!(out.contains("(query protocol)"), "{out}");
}

/// The aws CLI, unchanged but for the endpoint URL.
#[tokio::test]
async fn the_aws_cli_creates_sends_receives_and_reads_attributes() {
    let server = Server::start();
    let tenant = Tenant::create(&server, "cli-sqs", &ALL_QUEUE_SCOPES).await;
    let endpoint = server.base.clone();
    let run = move |args: Vec<String>, pair: (String, String)| {
        let mut all = args;
        all.extend([
            "--endpoint-url".into(),
            endpoint.clone(),
            "--output".into(),
            "json".into(),
        ]);
        let args: Vec<&str> = all.iter().map(String::as_str).collect();
        run_tool_with("aws", &args, (&pair.0, &pair.1), &[])
    };
    let call = |args: &[&str]| {
        let args: Vec<String> = args.iter().map(|s| s.to_string()).collect();
        let run = run.clone();
        let pair = tenant.key.clone();
        async move {
            tokio::task::spawn_blocking(move || run(args, pair))
                .await
                .unwrap()
        }
    };
    let Some(created) = call(&["sqs", "create-queue", "--queue-name", "cli-q"]).await else {
        eprintln!("skipped: the aws CLI is not installed");
        return;
    };
    assert!(
        created.status.success(),
        "{}",
        String::from_utf8_lossy(&created.stderr)
    );
    let url: Value = serde_json::from_slice(&created.stdout).unwrap();
    let url = url["QueueUrl"].as_str().unwrap().to_owned();
    assert_eq!(url, tenant.queue_url(&server, "cli-q"));
    let sent = call(&[
        "sqs",
        "send-message",
        "--queue-url",
        &url,
        "--message-body",
        "from the cli",
        "--message-attributes",
        r#"{"k":{"DataType":"String","StringValue":"v"}}"#,
    ])
    .await
    .unwrap();
    assert!(
        sent.status.success(),
        "{}",
        String::from_utf8_lossy(&sent.stderr)
    );
    let received = call(&[
        "sqs",
        "receive-message",
        "--queue-url",
        &url,
        "--message-attribute-names",
        "All",
        "--wait-time-seconds",
        "2",
    ])
    .await
    .unwrap();
    assert!(
        received.status.success(),
        "{}",
        String::from_utf8_lossy(&received.stderr)
    );
    let received: Value = serde_json::from_slice(&received.stdout).unwrap();
    assert_eq!(
        received["Messages"][0]["Body"], "from the cli",
        "{received}"
    );
    assert_eq!(
        received["Messages"][0]["MessageAttributes"]["k"]["StringValue"],
        "v"
    );
    let attributes = call(&[
        "sqs",
        "get-queue-attributes",
        "--queue-url",
        &url,
        "--attribute-names",
        "ApproximateNumberOfMessagesNotVisible",
    ])
    .await
    .unwrap();
    let attributes: Value = serde_json::from_slice(&attributes.stdout).unwrap();
    assert_eq!(
        attributes["Attributes"]["ApproximateNumberOfMessagesNotVisible"],
        "1"
    );
    let missing = call(&["sqs", "get-queue-url", "--queue-name", "nope"])
        .await
        .unwrap();
    assert!(!missing.status.success());
    assert!(
        String::from_utf8_lossy(&missing.stderr).contains("NonExistentQueue"),
        "{}",
        String::from_utf8_lossy(&missing.stderr)
    );
}

/// The Query protocol as older SDKs and Terraform's provider speak it: flattened parameters
/// in, XML out, also posted to a queue URL.
#[tokio::test]
async fn the_query_protocol_serves_queues_and_messages_in_xml() {
    let server = Server::start();
    let tenant = Tenant::create(&server, "query-sqs", &ALL_QUEUE_SCOPES).await;
    let created = tenant
        .query(
            &server,
            "/",
            &[
                ("Action", "CreateQueue"),
                ("Version", "2012-11-05"),
                ("QueueName", "xml-q"),
                ("Attribute.1.Name", "VisibilityTimeout"),
                ("Attribute.1.Value", "50"),
                ("Attribute.2.Name", "Policy"),
                ("Attribute.2.Value", "{\"Statement\": [] }"),
                ("Tag.1.Key", "env"),
                ("Tag.1.Value", "test"),
            ],
        )
        .await;
    assert_eq!(created.status, 200, "{}", created.text);
    assert!(created.text.contains(
        "<CreateQueueResponse xmlns=\"http://queue.amazonaws.com/doc/2012-11-05/\"><CreateQueueResult>"
    ));
    let url = tenant.queue_url(&server, "xml-q");
    assert_eq!(created.element("QueueUrl"), Some(url.as_str()));
    assert!(created.element("RequestId").is_some());

    let sent = tenant
        .query(
            &server,
            "/",
            &[
                ("Action", "SendMessage"),
                ("Version", "2012-11-05"),
                ("QueueUrl", &url),
                ("MessageBody", "a <b> & \"c\"\r\nd"),
                ("MessageAttribute.1.Name", "color"),
                ("MessageAttribute.1.Value.DataType", "String"),
                ("MessageAttribute.1.Value.StringValue", "red & blue"),
                ("MessageAttribute.2.Name", "bytes"),
                ("MessageAttribute.2.Value.DataType", "Binary"),
                ("MessageAttribute.2.Value.BinaryValue", "AAEC"),
            ],
        )
        .await;
    assert_eq!(sent.status, 200, "{}", sent.text);
    let md5_attributes = sent.element("MD5OfMessageAttributes").unwrap().to_owned();
    assert_eq!(
        sent.element("MD5OfMessageBody"),
        Some(sluice_services::md5_of_body("a <b> & \"c\"\r\nd").as_str())
    );

    // Posted to the queue URL, without QueueUrl, as some SDKs do.
    let path = format!("/{}/xml-q", tenant.account);
    let received = tenant
        .query(
            &server,
            &path,
            &[
                ("Action", "ReceiveMessage"),
                ("Version", "2012-11-05"),
                ("AttributeName.1", "All"),
                ("MessageAttributeName.1", "All"),
                ("WaitTimeSeconds", "1"),
            ],
        )
        .await;
    assert_eq!(received.status, 200, "{}", received.text);
    // The body reads back exactly, carriage return included, once XML-unescaped.
    assert_eq!(
        received.element("Body"),
        Some("a &lt;b&gt; &amp; &quot;c&quot;&#xD;\nd")
    );
    assert_eq!(
        received.element("MD5OfMessageAttributes"),
        Some(md5_attributes.as_str())
    );
    assert!(received.text.contains(
        "<MessageAttribute><Name>bytes</Name><Value><BinaryValue>AAEC</BinaryValue><DataType>Binary</DataType></Value></MessageAttribute>"
    ), "{}", received.text);
    assert!(received
        .text
        .contains("<Attribute><Name>ApproximateReceiveCount</Name><Value>1</Value></Attribute>"));
    let handle = received.element("ReceiptHandle").unwrap().to_owned();

    let batch = tenant
        .query(
            &server,
            "/",
            &[
                ("Action", "SendMessageBatch"),
                ("QueueUrl", &url),
                ("SendMessageBatchRequestEntry.1.Id", "one"),
                ("SendMessageBatchRequestEntry.1.MessageBody", "1"),
                ("SendMessageBatchRequestEntry.2.Id", "two"),
                ("SendMessageBatchRequestEntry.2.MessageBody", "2"),
                ("SendMessageBatchRequestEntry.2.DelaySeconds", "5"),
                (
                    "SendMessageBatchRequestEntry.2.MessageAttribute.1.Name",
                    "n",
                ),
                (
                    "SendMessageBatchRequestEntry.2.MessageAttribute.1.Value.DataType",
                    "Number",
                ),
                (
                    "SendMessageBatchRequestEntry.2.MessageAttribute.1.Value.StringValue",
                    "7",
                ),
            ],
        )
        .await;
    assert_eq!(batch.status, 200, "{}", batch.text);
    assert_eq!(
        batch.text.matches("<SendMessageBatchResultEntry>").count(),
        2
    );
    assert_eq!(batch.elements("Id"), ["one", "two"]);

    let deleted = tenant
        .query(
            &server,
            "/",
            &[
                ("Action", "DeleteMessageBatch"),
                ("QueueUrl", &url),
                ("DeleteMessageBatchRequestEntry.1.Id", "ok"),
                ("DeleteMessageBatchRequestEntry.1.ReceiptHandle", &handle),
                ("DeleteMessageBatchRequestEntry.2.Id", "bad"),
                ("DeleteMessageBatchRequestEntry.2.ReceiptHandle", "forged"),
            ],
        )
        .await;
    assert_eq!(deleted.status, 200, "{}", deleted.text);
    assert!(deleted
        .text
        .contains("<DeleteMessageBatchResultEntry><Id>ok</Id></DeleteMessageBatchResultEntry>"));
    assert!(
        deleted
            .text
            .contains("<BatchResultErrorEntry><Code>ReceiptHandleIsInvalid</Code><Id>bad</Id>"),
        "{}",
        deleted.text
    );
    assert!(deleted.text.contains("<SenderFault>true</SenderFault>"));

    let attributes = tenant
        .query(
            &server,
            "/",
            &[
                ("Action", "GetQueueAttributes"),
                ("QueueUrl", &url),
                ("AttributeName.member.1", "VisibilityTimeout"),
                ("AttributeName.member.2", "Policy"),
                (
                    "AttributeName.member.3",
                    "ApproximateNumberOfMessagesDelayed",
                ),
            ],
        )
        .await;
    assert_eq!(attributes.status, 200, "{}", attributes.text);
    assert_eq!(
        attributes.elements("Name"),
        [
            "ApproximateNumberOfMessagesDelayed",
            "Policy",
            "VisibilityTimeout"
        ]
    );
    assert_eq!(
        attributes.elements("Value"),
        ["1", "{&quot;Statement&quot;: [] }", "50"]
    );

    let tags = tenant
        .query(
            &server,
            "/",
            &[("Action", "ListQueueTags"), ("QueueUrl", &url)],
        )
        .await;
    assert!(tags
        .text
        .contains("<Tag><Key>env</Key><Value>test</Value></Tag>"));

    let listed = tenant
        .query(
            &server,
            "/",
            &[("Action", "ListQueues"), ("QueueNamePrefix", "xml")],
        )
        .await;
    assert_eq!(listed.elements("QueueUrl"), [url.as_str()]);

    // An action with output answers its result element even when it is empty; one without
    // output answers none.
    let empty = tenant
        .query(
            &server,
            "/",
            &[("Action", "ListQueues"), ("QueueNamePrefix", "none-such")],
        )
        .await;
    assert!(
        empty.text.contains("<ListQueuesResult></ListQueuesResult>"),
        "{}",
        empty.text
    );
    let purged = tenant
        .query(
            &server,
            "/",
            &[("Action", "PurgeQueue"), ("QueueUrl", &url)],
        )
        .await;
    assert_eq!(purged.status, 200);
    assert!(purged.text.contains("<PurgeQueueResponse xmlns=\"http://queue.amazonaws.com/doc/2012-11-05/\"><ResponseMetadata><RequestId>"), "{}", purged.text);
}

type Params<'a> = Vec<(&'a str, &'a str)>;

/// Query-protocol errors: AWS's codes in AWS's XML shape, and nothing changed.
#[tokio::test]
async fn the_query_protocol_answers_aws_errors() {
    let server = Server::start();
    let tenant = Tenant::create(&server, "query-errors", &ALL_QUEUE_SCOPES).await;
    let other = Tenant::create(&server, "query-other", &ALL_QUEUE_SCOPES).await;
    other
        .query(
            &server,
            "/",
            &[("Action", "CreateQueue"), ("QueueName", "theirs")],
        )
        .await;
    let theirs = other.queue_url(&server, "theirs");
    let cases: Vec<(Params, u16, &str)> = vec![
        (
            vec![
                ("Action", "SendMessage"),
                ("QueueUrl", &theirs),
                ("MessageBody", "x"),
            ],
            400,
            "AWS.SimpleQueueService.NonExistentQueue",
        ),
        (
            vec![("Action", "GetQueueUrl"), ("QueueName", "theirs")],
            400,
            "AWS.SimpleQueueService.NonExistentQueue",
        ),
        (vec![("Action", "CreateQueue")], 400, "MissingParameter"),
        (vec![("Action", "NoSuchAction")], 400, "InvalidAction"),
        (vec![("QueueName", "x")], 400, "MissingAction"),
        (
            vec![
                ("Action", "CreateQueue"),
                ("Version", "2008-01-01"),
                ("QueueName", "v"),
            ],
            400,
            "InvalidAction",
        ),
        (
            vec![
                ("Action", "CreateQueue"),
                ("QueueName", "gap"),
                ("Attribute.2.Name", "DelaySeconds"),
                ("Attribute.2.Value", "1"),
            ],
            400,
            "InvalidParameterValue",
        ),
        (
            vec![
                ("Action", "CreateQueue"),
                ("QueueName", "nameless"),
                ("Attribute.1.Value", "1"),
            ],
            400,
            "MissingParameter",
        ),
        (
            vec![
                ("Action", "ReceiveMessage"),
                ("QueueUrl", &theirs),
                ("MaxNumberOfMessages", "many"),
            ],
            400,
            "InvalidParameterValue",
        ),
    ];
    for (params, status, code) in cases {
        let answer = tenant.query(&server, "/", &params).await;
        assert_eq!(answer.status, status, "{params:?}: {}", answer.text);
        assert_eq!(
            answer.element("Code"),
            Some(code),
            "{params:?}: {}",
            answer.text
        );
        assert!(answer
            .text
            .contains("xmlns=\"http://queue.amazonaws.com/doc/2012-11-05/\""));
        assert_eq!(answer.element("Type"), Some("Sender"));
    }
    let listed = tenant
        .query(&server, "/", &[("Action", "ListQueues")])
        .await;
    assert!(listed.elements("QueueUrl").is_empty(), "{}", listed.text);
    // The other tenant's queue got no message.
    assert_eq!(
        rest_receive(&server, &other.id, "theirs").await["messages"],
        json!([])
    );
}

/// JSON-protocol errors: malformed bodies, unknown actions, missing members, key scopes and
/// bad signatures answer AWS's JSON error shape with `x-amzn-query-error`, never a 5xx.
#[tokio::test]
async fn the_json_protocol_answers_aws_errors() {
    let server = Server::start();
    let tenant = Tenant::create(&server, "json-errors", &ALL_QUEUE_SCOPES).await;
    tenant
        .json(&server, "CreateQueue", r#"{"QueueName": "j"}"#)
        .await;
    let url = tenant.queue_url(&server, "j");
    let cases: Vec<(&str, String, u16, &str, &str)> = vec![
        (
            "SendMessage",
            "{not json".into(),
            400,
            "com.amazon.coral.service#SerializationException",
            "MalformedQueryString",
        ),
        (
            "SendMessage",
            "[1, 2]".into(),
            400,
            "com.amazon.coral.service#SerializationException",
            "MalformedQueryString",
        ),
        (
            "SendMessage",
            json!({"QueueUrl": url, "MessageBody": 5}).to_string(),
            400,
            "com.amazon.coral.service#SerializationException",
            "MalformedQueryString",
        ),
        (
            "Frobnicate",
            "{}".into(),
            400,
            "com.amazon.coral.service#InvalidAction",
            "InvalidAction",
        ),
        (
            "SendMessage",
            json!({"MessageBody": "x"}).to_string(),
            400,
            "com.amazonaws.sqs#MissingParameter",
            "MissingParameter",
        ),
        (
            "SendMessage",
            json!({"QueueUrl": url}).to_string(),
            400,
            "com.amazonaws.sqs#MissingParameter",
            "MissingParameter",
        ),
        (
            "ReceiveMessage",
            json!({"QueueUrl": url, "WaitTimeSeconds": 21}).to_string(),
            400,
            "com.amazonaws.sqs#InvalidParameterValue",
            "InvalidParameterValue",
        ),
        (
            "DeleteMessage",
            json!({"QueueUrl": url, "ReceiptHandle": "forged"}).to_string(),
            404,
            "com.amazonaws.sqs#ReceiptHandleIsInvalid",
            "ReceiptHandleIsInvalid",
        ),
        (
            "GetQueueUrl",
            json!({"QueueName": "missing"}).to_string(),
            400,
            "com.amazonaws.sqs#QueueDoesNotExist",
            "AWS.SimpleQueueService.NonExistentQueue",
        ),
        (
            "SendMessage",
            json!({"QueueUrl": "http://elsewhere/123456789012/j", "MessageBody": "x"}).to_string(),
            400,
            "com.amazonaws.sqs#QueueDoesNotExist",
            "AWS.SimpleQueueService.NonExistentQueue",
        ),
        (
            "DeleteMessageBatch",
            json!({"QueueUrl": url, "Entries": []}).to_string(),
            400,
            "com.amazonaws.sqs#EmptyBatchRequest",
            "AWS.SimpleQueueService.EmptyBatchRequest",
        ),
    ];
    for (action, body, status, shape, code) in cases {
        tenant
            .json(&server, action, &body)
            .await
            .assert_json_error(status, shape, code);
    }
    // Nothing was sent by the refusals.
    let counts = tenant
        .json(
            &server,
            "GetQueueAttributes",
            &json!({"QueueUrl": url, "AttributeNames": ["ApproximateNumberOfMessages"]})
                .to_string(),
        )
        .await;
    assert_eq!(
        counts.json()["Attributes"]["ApproximateNumberOfMessages"],
        "0"
    );

    // A key without the scope an action needs.
    let (status, key) =
        create_key(&server, "json-errors", json!({"scopes": ["messages:send"]})).await;
    assert_eq!(status, 201);
    let sender = Tenant {
        id: tenant.id.clone(),
        account: tenant.account.clone(),
        key: (
            key["access_key_id"].as_str().unwrap().to_owned(),
            key["secret_access_key"].as_str().unwrap().to_owned(),
        ),
    };
    sender
        .json(&server, "CreateQueue", r#"{"QueueName": "denied"}"#)
        .await
        .assert_json_error(403, "com.amazon.coral.service#AccessDenied", "AccessDenied");
    sender
        .json(
            &server,
            "ReceiveMessage",
            &json!({"QueueUrl": url}).to_string(),
        )
        .await
        .assert_json_error(403, "com.amazon.coral.service#AccessDenied", "AccessDenied");
    let sent = sender
        .json(
            &server,
            "SendMessage",
            &json!({"QueueUrl": url, "MessageBody": "ok"}).to_string(),
        )
        .await;
    assert_eq!(sent.status, 200, "{}", sent.text);
    tenant
        .json(&server, "GetQueueUrl", r#"{"QueueName": "denied"}"#)
        .await
        .assert_json_error(
            400,
            "com.amazonaws.sqs#QueueDoesNotExist",
            "AWS.SimpleQueueService.NonExistentQueue",
        );

    // A batch longer than the largest message together.
    let big = "x".repeat(600_000);
    tenant
        .json(
            &server,
            "SendMessageBatch",
            &json!({"QueueUrl": url, "Entries": [
                {"Id": "a", "MessageBody": big},
                {"Id": "b", "MessageBody": big}
            ]})
            .to_string(),
        )
        .await
        .assert_json_error(
            400,
            "com.amazonaws.sqs#BatchRequestTooLong",
            "AWS.SimpleQueueService.BatchRequestTooLong",
        );

    // An unsigned JSON request is refused in JSON.
    let unsigned = server
        .client
        .post(server.url("/"))
        .header("content-type", JSON)
        .header("x-amz-target", "AmazonSQS.ListQueues")
        .body("{}")
        .send()
        .await
        .unwrap();
    assert_eq!(unsigned.status(), 403);
    assert_eq!(
        unsigned
            .headers()
            .get("x-amzn-query-error")
            .and_then(|v| v.to_str().ok()),
        Some("MissingAuthenticationToken;Sender")
    );

    // A bad signature answers in JSON too, as the client speaks JSON.
    let forged = Tenant {
        id: tenant.id.clone(),
        account: tenant.account.clone(),
        key: (tenant.key.0.clone(), "0".repeat(40)),
    };
    forged
        .json(&server, "ListQueues", "{}")
        .await
        .assert_json_error(
            403,
            "com.amazon.coral.service#SignatureDoesNotMatch",
            "SignatureDoesNotMatch",
        );
}

/// One tenant's queues are the same over SQS and REST: a message sent one way is received the
/// other way with the same digests, and queues created over SQS are listed over REST.
#[tokio::test]
async fn messages_cross_between_sqs_and_rest_with_the_same_digests() {
    let server = Server::start();
    let tenant = Tenant::create(&server, "interop", &ALL_QUEUE_SCOPES).await;
    let token = tenant_token(&tenant.id);
    let created = tenant
        .json(&server, "CreateQueue", r#"{"QueueName": "both"}"#)
        .await;
    assert_eq!(created.status, 200, "{}", created.text);
    let url = created.json()["QueueUrl"].as_str().unwrap().to_owned();
    let (status, listed) = server.call(Method::GET, "/v1/queues", &token, None).await;
    assert_eq!(status, 200);
    assert_eq!(listed["queues"][0]["name"], "both", "{listed}");

    // SQS → REST.
    let sent = tenant
        .json(
            &server,
            "SendMessage",
            &json!({
                "QueueUrl": url,
                "MessageBody": "over sqs",
                "MessageAttributes": {
                    "s": {"DataType": "String", "StringValue": "v"},
                    "b": {"DataType": "Binary", "BinaryValue": "AAEC"},
                    "n": {"DataType": "Number.int", "StringValue": "3"}
                }
            })
            .to_string(),
        )
        .await
        .json();
    let received = rest_receive(&server, &tenant.id, "both").await;
    let message = &received["messages"][0];
    assert_eq!(message["body"], "over sqs");
    assert_eq!(message["message_id"], sent["MessageId"]);
    assert_eq!(message["md5_of_body"], sent["MD5OfMessageBody"]);
    assert_eq!(message["md5_of_attributes"], sent["MD5OfMessageAttributes"]);
    assert_eq!(
        message["attributes"]["b"],
        json!({"type": "Binary", "value": "AAEC"})
    );
    let (status, _) = server
        .call(
            Method::DELETE,
            &format!(
                "/v1/queues/both/messages/{}",
                message["receipt_handle"].as_str().unwrap()
            ),
            &token,
            None,
        )
        .await;
    assert_eq!(status, 204);

    // REST → SQS.
    let (status, rest_sent) = server
        .call(
            Method::POST,
            "/v1/queues/both/messages",
            &token,
            Some(json!({
                "body": "over rest",
                "attributes": {"k": {"type": "String", "value": "w"}, "z": {"type": "Binary", "value": "/w=="}}
            })),
        )
        .await;
    assert_eq!(status, 201, "{rest_sent}");
    let received = tenant
        .json(
            &server,
            "ReceiveMessage",
            &json!({"QueueUrl": url, "MessageAttributeNames": ["All"], "WaitTimeSeconds": 1})
                .to_string(),
        )
        .await
        .json();
    let message = &received["Messages"][0];
    assert_eq!(message["Body"], "over rest", "{received}");
    assert_eq!(message["MessageId"], rest_sent["message_id"]);
    assert_eq!(message["MD5OfBody"], rest_sent["md5_of_body"]);
    assert_eq!(
        message["MD5OfMessageAttributes"],
        rest_sent["md5_of_attributes"]
    );
    assert_eq!(
        message["MessageAttributes"]["z"],
        json!({"DataType": "Binary", "BinaryValue": "/w=="})
    );

    // A queue deleted over REST is gone over SQS.
    let (status, _) = server
        .call(Method::DELETE, "/v1/queues/both", &token, None)
        .await;
    assert_eq!(status, 204);
    tenant
        .json(&server, "GetQueueUrl", r#"{"QueueName": "both"}"#)
        .await
        .assert_json_error(
            400,
            "com.amazonaws.sqs#QueueDoesNotExist",
            "AWS.SimpleQueueService.NonExistentQueue",
        );
}

/// Opaque attributes belong to one creation of a queue: a queue deleted and created again
/// under the same name starts without them.
#[tokio::test]
async fn a_recreated_queue_does_not_inherit_stored_attributes() {
    let server = Server::start();
    let tenant = Tenant::create(&server, "recreate", &ALL_QUEUE_SCOPES).await;
    let create =
        json!({"QueueName": "again", "Attributes": {"Policy": "{\"v\":1}", "KmsMasterKeyId": "k"}})
            .to_string();
    let url = tenant.json(&server, "CreateQueue", &create).await.json()["QueueUrl"]
        .as_str()
        .unwrap()
        .to_owned();
    let all = json!({"QueueUrl": url, "AttributeNames": ["All"]}).to_string();
    let attributes = tenant
        .json(&server, "GetQueueAttributes", &all)
        .await
        .json();
    assert_eq!(attributes["Attributes"]["Policy"], "{\"v\":1}");
    let deleted = tenant
        .json(
            &server,
            "DeleteQueue",
            &json!({"QueueUrl": url}).to_string(),
        )
        .await;
    assert_eq!(deleted.status, 200, "{}", deleted.text);
    // Creation times are in milliseconds; make sure the next creation gets another.
    tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    tenant
        .json(&server, "CreateQueue", r#"{"QueueName": "again"}"#)
        .await;
    let attributes = tenant
        .json(&server, "GetQueueAttributes", &all)
        .await
        .json();
    assert!(
        attributes["Attributes"].get("Policy").is_none(),
        "{attributes}"
    );
    assert!(
        attributes["Attributes"].get("KmsMasterKeyId").is_none(),
        "{attributes}"
    );
}

/// `--public-url` names the queue URLs answered, and those URLs are accepted back.
#[tokio::test]
async fn queue_urls_use_the_public_url() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start_in(
        dir.path(),
        &[
            "--jwt-secret",
            crate::harness::SECRET,
            "--public-url",
            "https://queues.example.com/",
        ],
    );
    let tenant = Tenant::create(&server, "public", &ALL_QUEUE_SCOPES).await;
    let created = tenant
        .json(&server, "CreateQueue", r#"{"QueueName": "pub"}"#)
        .await
        .json();
    let url = format!("https://queues.example.com/{}/pub", tenant.account);
    assert_eq!(created["QueueUrl"], url.as_str());
    let sent = tenant
        .json(
            &server,
            "SendMessage",
            &json!({"QueueUrl": url, "MessageBody": "m"}).to_string(),
        )
        .await;
    assert_eq!(sent.status, 200, "{}", sent.text);
}

/// A client of the Rust SDK (`aws-sdk-sqs`) for `tenant`.
pub(crate) fn sdk_client(server: &Server, tenant: &Tenant) -> aws_sdk_sqs::Client {
    use aws_sdk_sqs::config::{BehaviorVersion, Credentials, Region};
    let config = aws_sdk_sqs::Config::builder()
        .behavior_version(BehaviorVersion::latest())
        .region(Region::new("us-east-1"))
        .endpoint_url(&server.base)
        .credentials_provider(Credentials::new(
            &tenant.key.0,
            &tenant.key.1,
            None,
            None,
            "e2e",
        ))
        .http_client(aws_smithy_http_client::Builder::new().build_http())
        .build();
    aws_sdk_sqs::Client::from_conf(config)
}

/// The Rust SDK (JSON protocol) sends, batches, receives with binary attributes and deletes;
/// the digests it is answered are SQS's published values for the same body and attribute.
#[tokio::test]
async fn the_rust_sdk_round_trips_messages_with_published_digests() {
    use aws_sdk_sqs::primitives::Blob;
    use aws_sdk_sqs::types::{MessageAttributeValue, SendMessageBatchRequestEntry};
    let server = Server::start();
    let tenant = Tenant::create(&server, "rust-sdk", &ALL_QUEUE_SCOPES).await;
    let sqs = sdk_client(&server, &tenant);
    let url = sqs
        .create_queue()
        .queue_name("sdk")
        .send()
        .await
        .unwrap()
        .queue_url
        .unwrap();
    let attribute = |data_type: &str, text: Option<&str>, bytes: Option<&[u8]>| {
        let mut value = MessageAttributeValue::builder().data_type(data_type);
        if let Some(text) = text {
            value = value.string_value(text);
        }
        if let Some(bytes) = bytes {
            value = value.binary_value(Blob::new(bytes));
        }
        value.build().unwrap()
    };
    // MD5 of "hello", and SQS's digest of this one attribute as its documentation computes it.
    const HELLO_MD5: &str = "5d41402abc4b2a76b9719d911017c592";
    const SELLER_MD5: &str = "cd28f3b68aeee4b2eac9c66f2f694b58";
    let published = sqs
        .send_message()
        .queue_url(&url)
        .message_body("hello")
        .message_attributes(
            "SellerName",
            attribute("String", Some("Example Store"), None),
        )
        .send()
        .await
        .unwrap();
    assert_eq!(published.md5_of_message_body.as_deref(), Some(HELLO_MD5));
    assert_eq!(
        published.md5_of_message_attributes.as_deref(),
        Some(SELLER_MD5)
    );
    let sent = sqs
        .send_message()
        .queue_url(&url)
        .message_body("r\u{fc}st \r\n")
        .message_attributes("s", attribute("String", Some("\u{1F980}"), None))
        .message_attributes("n", attribute("Number", Some("-1.5"), None))
        .message_attributes("b", attribute("Binary", None, Some(&[0, 1, 254, 255])))
        .send()
        .await
        .unwrap();
    let batch = sqs
        .send_message_batch()
        .queue_url(&url)
        .entries(
            SendMessageBatchRequestEntry::builder()
                .id("e1")
                .message_body("batched")
                .message_attributes("k", attribute("String.label", Some("v"), None))
                .build()
                .unwrap(),
        )
        .send()
        .await
        .unwrap();
    assert_eq!(batch.successful.len(), 1);
    let mut bodies = Vec::new();
    while bodies.len() < 3 {
        let received = sqs
            .receive_message()
            .queue_url(&url)
            .max_number_of_messages(10)
            .message_attribute_names("All")
            .wait_time_seconds(2)
            .send()
            .await
            .unwrap();
        for message in received.messages.unwrap_or_default() {
            if message.message_id == published.message_id {
                assert_eq!(message.md5_of_body.as_deref(), Some(HELLO_MD5));
                assert_eq!(
                    message.md5_of_message_attributes.as_deref(),
                    Some(SELLER_MD5)
                );
            }
            if message.message_id == sent.message_id {
                let attributes = message.message_attributes.clone().unwrap();
                assert_eq!(
                    attributes["b"].binary_value.as_ref().map(|b| b.as_ref()),
                    Some(&[0u8, 1, 254, 255][..])
                );
                assert_eq!(
                    message.md5_of_message_attributes,
                    sent.md5_of_message_attributes
                );
            }
            sqs.delete_message()
                .queue_url(&url)
                .receipt_handle(message.receipt_handle.unwrap())
                .send()
                .await
                .unwrap();
            bodies.push(message.body.unwrap());
        }
    }
    bodies.sort();
    assert_eq!(bodies, ["batched", "hello", "r\u{fc}st \r\n"]);
    let error = sqs
        .get_queue_url()
        .queue_name("missing")
        .send()
        .await
        .unwrap_err();
    assert!(
        error
            .as_service_error()
            .is_some_and(|e| e.is_queue_does_not_exist()),
        "{error:?}"
    );
}

/// A tenant past its request rate is answered `RequestThrottled`, which SDKs retry with
/// backoff, in the shape of the client's protocol.
#[tokio::test]
async fn a_tenant_past_its_rate_is_throttled() {
    let server = Server::start();
    let tenant = Tenant::create_with(
        &server,
        json!({"id": "throttled", "quotas": {"requests_per_second": 1, "burst": 2}}),
        &ALL_QUEUE_SCOPES,
    )
    .await;
    let mut throttled = None;
    for _ in 0..10 {
        let answer = tenant.json(&server, "ListQueues", "{}").await;
        if answer.status != 200 {
            throttled = Some(answer);
            break;
        }
    }
    let answer = throttled.expect("ten requests at once and none throttled");
    answer.assert_json_error(
        400,
        "com.amazon.coral.service#RequestThrottled",
        "RequestThrottled",
    );
    let query = tenant
        .query(&server, "/", &[("Action", "ListQueues")])
        .await;
    query.assert_error(400, "RequestThrottled");
}

/// On Redis, two gateways serve one tenant's queues over SQS: a queue and its stored
/// attributes made through one are read through the other, and messages cross them.
#[tokio::test]
async fn gateways_on_one_redis_serve_the_same_sqs_queues() {
    let redis = sluice_testkit::RedisServer::start().unwrap();
    let prefix = sluice_testkit::unique_prefix("e2e-sqs");
    let start = || crate::harness::redis_gateway(&redis.url(), &prefix, &[]);
    let ((_a_dir, a), (_b_dir, b)) = (start(), start());
    let tenant = Tenant::create(&a, "redis-sqs", &ALL_QUEUE_SCOPES).await;
    let created = tenant
        .json(
            &a,
            "CreateQueue",
            r#"{"QueueName": "shared", "Attributes": {"Policy": "{ \"Statement\" : [] }", "VisibilityTimeout": "9"}}"#,
        )
        .await;
    assert_eq!(created.status, 200, "{}", created.text);
    let url = tenant.queue_url(&a, "shared");
    let attributes = tenant
        .json(
            &b,
            "GetQueueAttributes",
            &json!({"QueueUrl": url, "AttributeNames": ["Policy", "VisibilityTimeout"]})
                .to_string(),
        )
        .await
        .json();
    assert_eq!(
        attributes["Attributes"],
        json!({"Policy": "{ \"Statement\" : [] }", "VisibilityTimeout": "9"})
    );
    let sent = tenant
        .query(
            &b,
            "/",
            &[
                ("Action", "SendMessage"),
                ("QueueUrl", &url),
                ("MessageBody", "across"),
                ("MessageAttribute.1.Name", "k"),
                ("MessageAttribute.1.Value.DataType", "String"),
                ("MessageAttribute.1.Value.StringValue", "v"),
            ],
        )
        .await;
    assert_eq!(sent.status, 200, "{}", sent.text);
    let received = tenant
        .json(
            &a,
            "ReceiveMessage",
            &json!({"QueueUrl": url, "MessageAttributeNames": ["All"], "WaitTimeSeconds": 2})
                .to_string(),
        )
        .await
        .json();
    let message = &received["Messages"][0];
    assert_eq!(message["Body"], "across", "{received}");
    assert_eq!(
        message["MD5OfMessageAttributes"].as_str(),
        sent.element("MD5OfMessageAttributes")
    );
    let deleted = tenant
        .json(&b, "DeleteQueue", &json!({"QueueUrl": url}).to_string())
        .await;
    assert_eq!(deleted.status, 200, "{}", deleted.text);
    tenant
        .json(&a, "GetQueueUrl", r#"{"QueueName": "shared"}"#)
        .await
        .assert_json_error(
            400,
            "com.amazonaws.sqs#QueueDoesNotExist",
            "AWS.SimpleQueueService.NonExistentQueue",
        );
}
