//! SNS over the AWS endpoint against the real binary: boto3's SNS client over every action
//! (`aws_sns.py`), the aws CLI for a few, the copies published over SNS received over REST
//! (filter policies, raw and enveloped delivery, FIFO), tenant isolation, scopes, and bad input
//! answered with SNS's codes.

use crate::aws_identity::{
    account_of, admin, create_key, create_tenant, run_tool, signed_post, AwsAnswer,
};
use crate::harness::{tenant_token, Server};
use reqwest::Method;
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::time::{Duration, Instant, SystemTime};

/// Receives from `queue` over REST until `count` messages came (or 10 s passed), then checks
/// that no more arrive.
async fn receive(server: &Server, token: &str, queue: &str, count: usize) -> Vec<Value> {
    let mut got = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(10);
    let path = format!("/v1/queues/{queue}/messages/receive");
    let body = json!({"max_messages": 10, "visibility_timeout_seconds": 60});
    while got.len() < count && Instant::now() < deadline {
        let (status, answer) = server
            .call(Method::POST, &path, token, Some(body.clone()))
            .await;
        assert_eq!(status, 200, "{answer}");
        let messages = answer["messages"].as_array().cloned().unwrap_or_default();
        if messages.is_empty() {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        got.extend(messages);
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    let (_, extra) = server.call(Method::POST, &path, token, Some(body)).await;
    got.extend(extra["messages"].as_array().cloned().unwrap_or_default());
    assert_eq!(got.len(), count, "{queue}: {got:#?}");
    got
}

/// The SNS envelopes of enveloped copies, by their `MessageId`.
fn envelopes(messages: &[Value]) -> BTreeMap<String, Value> {
    messages
        .iter()
        .map(|m| {
            let envelope: Value = serde_json::from_str(m["body"].as_str().unwrap())
                .unwrap_or_else(|e| panic!("not an envelope: {e}: {m}"));
            assert_eq!(envelope["Type"], "Notification", "{envelope}");
            (envelope["MessageId"].as_str().unwrap().to_owned(), envelope)
        })
        .collect()
}

/// Runs a tool off the async runtime.
async fn tool(
    program: &str,
    args: Vec<String>,
    key: &(String, String),
) -> Option<std::process::Output> {
    let program = program.to_owned();
    let key = key.clone();
    tokio::task::spawn_blocking(move || {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        run_tool(&program, &args, (&key.0, &key.1))
    })
    .await
    .unwrap()
}

async fn key_pair(server: &Server, tenant: &str, scopes: Value) -> (String, String) {
    let (status, key) = create_key(server, tenant, json!({ "scopes": scopes })).await;
    assert_eq!(status, 201, "{key}");
    (
        key["access_key_id"].as_str().unwrap().to_owned(),
        key["secret_access_key"].as_str().unwrap().to_owned(),
    )
}

async fn tenant_account(server: &Server, tenant: &str) -> String {
    assert_eq!(create_tenant(server, json!({ "id": tenant })).await.0, 201);
    let (_, record) = server
        .call(
            Method::GET,
            &format!("/v1/admin/tenants/{tenant}"),
            &admin(),
            None,
        )
        .await;
    account_of(&record)
}

async fn put(server: &Server, token: &str, path: &str) {
    let (status, answer) = server.call(Method::PUT, path, token, None).await;
    assert_eq!(status, 201, "{path}: {answer}");
}

/// boto3 over every action, then the copies over REST; skipped (with a note) where boto3 is
/// not installed, as `tests/run.sh` installs it.
#[tokio::test]
async fn boto3_drives_every_sns_action_and_rest_receives_the_copies() {
    let server = Server::start();
    let account = tenant_account(&server, "sns").await;
    let other_account = tenant_account(&server, "other").await;
    let full = key_pair(&server, "sns", json!(["topics:manage", "topics:publish"])).await;
    let publisher = key_pair(&server, "sns", json!(["topics:publish"])).await;
    let rest = tenant_token("sns");
    for queue in ["all", "red", "raw", "body", "dlq", "fifo-q.fifo"] {
        put(&server, &rest, &format!("/v1/queues/{queue}")).await;
    }
    let theirs = tenant_token("other");
    put(&server, &theirs, "/v1/queues/theirs").await;
    put(&server, &theirs, "/v1/topics/secret").await;

    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/../tests/e2e/aws_sns.py");
    let endpoint = server.url("");
    let args = vec![
        script.to_owned(),
        endpoint.clone(),
        account.clone(),
        other_account.clone(),
        publisher.0.clone(),
        publisher.1.clone(),
    ];
    let Some(output) = tool("python3", args, &full).await else {
        eprintln!("skipped: python3 is not installed");
        return;
    };
    let stderr = String::from_utf8_lossy(&output.stderr);
    if !output.status.success() && stderr.contains("No module named 'boto3'") {
        eprintln!("skipped: boto3 is not installed");
        return;
    }
    assert!(output.status.success(), "aws_sns.py: {stderr}");
    let ids: Value = serde_json::from_slice(&output.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&output.stdout)));
    let news = format!("arn:aws:sns:us-east-1:{account}:news");

    // The aws CLI publishes and lists too.
    let mut cli_message = None;
    let cli = |args: &[&str]| {
        let mut all: Vec<String> = args.iter().map(|a| a.to_string()).collect();
        all.extend([
            "--endpoint-url".into(),
            endpoint.clone(),
            "--output".into(),
            "json".into(),
        ]);
        all
    };
    if let Some(out) = tool("aws", cli(&["sns", "list-topics"]), &full).await {
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let listed: Value = serde_json::from_slice(&out.stdout).unwrap();
        let arns: Vec<&str> = listed["Topics"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["TopicArn"].as_str().unwrap())
            .collect();
        assert!(arns.contains(&news.as_str()), "{listed}");
        let out = tool(
            "aws",
            cli(&[
                "sns",
                "publish",
                "--topic-arn",
                &news,
                "--message",
                "from the cli",
            ]),
            &full,
        )
        .await
        .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let published: Value = serde_json::from_slice(&out.stdout).unwrap();
        cli_message = Some(published["MessageId"].as_str().unwrap().to_owned());
        let out = tool(
            "aws",
            cli(&["sns", "get-topic-attributes", "--topic-arn", &news]),
            &full,
        )
        .await
        .unwrap();
        assert!(out.status.success());
        let got: Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(got["Attributes"]["DisplayName"], "Renamed", "{got}");
    } else {
        eprintln!("skipped: the aws CLI is not installed");
    }

    // Enveloped copies: every message, SNS's envelope with the topic's ARN.
    let expected_all = 5 + usize::from(cli_message.is_some());
    let all = envelopes(&receive(&server, &rest, "all", expected_all).await);
    for envelope in all.values() {
        assert_eq!(envelope["TopicArn"], news.as_str(), "{envelope}");
    }
    let red = &all[ids["red"].as_str().unwrap()];
    assert_eq!(red["Message"], "hello red");
    assert_eq!(red["Subject"], "Greetings");
    assert_eq!(
        red["MessageAttributes"]["color"],
        json!({"Type": "String", "Value": "red"})
    );
    assert_eq!(
        all[ids["structured"].as_str().unwrap()]["Message"],
        "for queues"
    );
    assert_eq!(all[ids["batched"].as_str().unwrap()]["Message"], "batched");
    if let Some(id) = &cli_message {
        assert_eq!(all[id]["Message"], "from the cli");
    }

    // The filter policy let only the red message through.
    let filtered = envelopes(&receive(&server, &rest, "red", 1).await);
    assert_eq!(
        filtered.keys().collect::<Vec<_>>(),
        [ids["red"].as_str().unwrap()]
    );
    // The body-scope policy only the JSON body with kind "a".
    let body = envelopes(&receive(&server, &rest, "body", 1).await);
    assert_eq!(
        body[ids["body"].as_str().unwrap()]["Message"],
        r#"{"kind": "a"}"#
    );

    // Raw copies: bodies and attributes as published.
    let raw = receive(&server, &rest, "raw", expected_all).await;
    let blue = raw
        .iter()
        .find(|m| m["body"] == "hello blue")
        .unwrap_or_else(|| panic!("{raw:#?}"));
    assert_eq!(
        blue["attributes"]["color"],
        json!({"type": "String", "value": "blue"})
    );
    assert_eq!(
        blue["attributes"]["blob"],
        json!({"type": "Binary", "value": "AAE="})
    );
    assert!(raw.iter().any(|m| m["body"] == r#"{"kind": "a"}"#));

    // FIFO: the deduplicated publish delivered once, in its group, with the sequence number.
    let orders = receive(&server, &rest, "fifo-q.fifo", 2).await;
    let first: Value = serde_json::from_str(orders[0]["body"].as_str().unwrap()).unwrap();
    assert_eq!(first["Message"], "order 1");
    assert_eq!(first["MessageId"], ids["order"]);
    assert!(first["SequenceNumber"].as_str().is_some(), "{first}");
    assert_eq!(orders[0]["group_id"], "g1", "{}", orders[0]);

    // One tenant's resources, whichever way they are reached.
    let (_, topics) = server.call(Method::GET, "/v1/topics", &rest, None).await;
    let names: Vec<&str> = topics["topics"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["news", "orders.fifo", "plain"], "{topics}");
    let red_arn = ids["red_subscription"].as_str().unwrap();
    let suffix = red_arn.strip_prefix(&format!("{news}:")).unwrap();
    let (status, subscription) = server
        .call(
            Method::GET,
            &format!("/v1/subscriptions/news.{suffix}"),
            &rest,
            None,
        )
        .await;
    assert_eq!(status, 200, "{subscription}");
    assert_eq!(subscription["filter_policy"], json!({"color": ["red"]}));
    assert_eq!(subscription["queue"], "red");
    // The other tenant's topic is untouched by the refused calls.
    let (status, _) = server
        .call(Method::GET, "/v1/topics/secret", &theirs, None)
        .await;
    assert_eq!(status, 200);
}

/// Malformed SNS requests, signed as an SDK signs them: SNS's codes, never a 5xx, nothing
/// changed.
#[tokio::test]
async fn bad_sns_input_answers_sns_codes_and_changes_nothing() {
    let server = Server::start();
    let account = tenant_account(&server, "bad").await;
    let key = key_pair(&server, "bad", json!(["topics:manage", "topics:publish"])).await;
    let rest = tenant_token("bad");
    put(&server, &rest, "/v1/topics/news").await;
    let news = format!("arn%3Aaws%3Asns%3Aus-east-1%3A{account}%3Anews");
    let post = |body: String| {
        let key = key.clone();
        let server = &server;
        async move { signed_post(server, (&key.0, &key.1), "sns", &body, SystemTime::now()).await }
    };
    let v = "Version=2010-03-31";
    let cases: Vec<(String, u16, &str, &str)> = vec![
        (format!("Action=Frobnicate&{v}"), 400, "InvalidAction", "Frobnicate"),
        ("Action=ListTopics&Version=2012-11-05".into(), 400, "InvalidAction", "2012-11-05"),
        (format!("{v}&Name=x"), 400, "MissingAction", "Action"),
        (format!("Action=GetTopicAttributes&{v}"), 400, "InvalidParameter", "TopicArn"),
        (format!("Action=Publish&{v}&Message=x"), 400, "InvalidParameter", "TopicArn"),
        (format!("Action=Publish&{v}&TopicArn={news}"), 400, "InvalidParameter", "Message"),
        (
            format!("Action=GetTopicAttributes&{v}&TopicArn=arn%3Aaws%3Asns%3Aus-east-1%3A12%3Anews"),
            400,
            "InvalidParameter",
            "TopicArn",
        ),
        (format!("Action=CreateTopic&{v}"), 400, "InvalidParameter", "Name"),
        (
            format!("Action=CreateTopic&{v}&Name=x&Attributes.entry.2.key=DisplayName&Attributes.entry.2.value=y"),
            400,
            "InvalidParameter",
            "Attributes.entry.1",
        ),
        (
            format!("Action=CreateTopic&{v}&Name=x&Attributes.entry.1.key=Colour&Attributes.entry.1.value=y"),
            400,
            "InvalidParameter",
            "Colour",
        ),
        (
            format!("Action=Publish&{v}&TopicArn={news}&Message=x&MessageAttributes.entry.1.Name=a"),
            400,
            "InvalidParameter",
            "DataType",
        ),
        (format!("Action=Subscribe&{v}&TopicArn={news}"), 400, "InvalidParameter", "Protocol"),
        (
            format!("Action=Subscribe&{v}&TopicArn={news}&Protocol=sms&Endpoint=%2B15555550100"),
            400,
            "InvalidParameter",
            "sms",
        ),
        (
            format!("Action=Subscribe&{v}&TopicArn={news}&Protocol=sqs&Endpoint=arn%3Aaws%3Asqs%3Aus-east-1%3A{account}%3Anone"),
            404,
            "NotFound",
            "queue",
        ),
        (format!("Action=PublishBatch&{v}&TopicArn={news}"), 400, "EmptyBatchRequest", "entries"),
        (format!("Action=Unsubscribe&{v}&SubscriptionArn=x"), 400, "InvalidParameter", "SubscriptionArn"),
        (format!("Action=ListTopics&{v}&NextToken=garbage"), 400, "InvalidParameter", "NextToken"),
        (
            format!("Action=SetSubscriptionAttributes&{v}&SubscriptionArn=arn%3Aaws%3Asns%3Aus-east-1%3A{account}%3Anews%3Aabc&AttributeName=RawMessageDelivery&AttributeValue=true"),
            404,
            "NotFound",
            "Subscription",
        ),
    ];
    for (body, status, code, fragment) in cases {
        let answer: AwsAnswer = post(body.clone()).await;
        assert_eq!(answer.status, status, "{body}: {}", answer.text);
        answer.assert_error(status, code);
        assert!(
            answer
                .text
                .contains("http://sns.amazonaws.com/doc/2010-03-31/"),
            "{}",
            answer.text
        );
        let message = answer.element("Message").unwrap_or_default();
        assert!(message.contains(fragment), "{body}: {message}");
    }
    let (_, topics) = server.call(Method::GET, "/v1/topics", &rest, None).await;
    assert_eq!(topics["topics"].as_array().unwrap().len(), 1, "{topics}");
    assert_eq!(topics["topics"][0]["subscription_count"], 0, "{topics}");

    // The tenant's max_topics: SNS's TopicLimitExceeded; an existing topic is still answered.
    let (status, _) =
        create_tenant(&server, json!({"id": "small", "quotas": {"max_topics": 1}})).await;
    assert_eq!(status, 201);
    let small = key_pair(&server, "small", json!(["topics:manage"])).await;
    let create = |name: &str| {
        let body = format!("Action=CreateTopic&{v}&Name={name}");
        let small = small.clone();
        let server = &server;
        async move {
            signed_post(
                server,
                (&small.0, &small.1),
                "sns",
                &body,
                SystemTime::now(),
            )
            .await
        }
    };
    assert_eq!(create("one").await.status, 200);
    create("two").await.assert_error(403, "TopicLimitExceeded");
    let again = create("one").await;
    assert_eq!(again.status, 200, "{}", again.text);
    assert!(
        again
            .element("TopicArn")
            .is_some_and(|arn| arn.ends_with(":one")),
        "{}",
        again.text
    );

    // The tenant's request rate: RequestThrottled, which SDKs retry with backoff.
    let quotas = json!({"id": "busy", "quotas": {"requests_per_second": 1, "burst": 1}});
    assert_eq!(create_tenant(&server, quotas).await.0, 201);
    let busy = key_pair(&server, "busy", json!(["topics:manage"])).await;
    let list = format!("Action=ListTopics&{v}");
    let sign = (busy.0.as_str(), busy.1.as_str());
    let first = signed_post(&server, sign, "sns", &list, SystemTime::now()).await;
    assert_eq!(first.status, 200, "{}", first.text);
    signed_post(&server, sign, "sns", &list, SystemTime::now())
        .await
        .assert_error(400, "RequestThrottled");
}

/// A form body of Query parameters, encoded as SDKs encode them.
fn form(pairs: &[(&str, &str)]) -> String {
    form_urlencoded::Serializer::new(String::new())
        .extend_pairs(pairs)
        .finish()
}

/// On Redis, two gateways serve one tenant's topics: what one stores (attributes written as
/// given, a filtered subscription) the other answers and publishes through.
#[tokio::test]
async fn gateways_on_one_redis_share_topics_attributes_and_subscriptions() {
    let redis = sluice_testkit::RedisServer::start().unwrap();
    let prefix = sluice_testkit::unique_prefix("e2e-sns");
    let start = || crate::harness::redis_gateway(&redis.url(), &prefix, &[]);
    let ((_a_dir, a), (_b_dir, b)) = (start(), start());
    let account = tenant_account(&a, "r").await;
    let key = key_pair(&a, "r", json!(["topics:manage", "topics:publish"])).await;
    let rest = tenant_token("r");
    put(&b, &rest, "/v1/queues/q").await;
    let policy = "{ \"Statement\": [] }";
    let created = call(
        &a,
        &key,
        &[
            ("Action", "CreateTopic"),
            ("Name", "news"),
            ("Attributes.entry.1.key", "Policy"),
            ("Attributes.entry.1.value", policy),
        ],
    )
    .await;
    assert_eq!(created.status, 200, "{}", created.text);
    let news = format!("arn:aws:sns:us-east-1:{account}:news");
    assert_eq!(created.element("TopicArn"), Some(news.as_str()));
    let filter = r#"{"color": ["red"]}"#;
    let queue = format!("arn:aws:sqs:us-east-1:{account}:q");
    let subscribed = call(
        &a,
        &key,
        &[
            ("Action", "Subscribe"),
            ("TopicArn", &news),
            ("Protocol", "sqs"),
            ("Endpoint", &queue),
            ("Attributes.entry.1.key", "FilterPolicy"),
            ("Attributes.entry.1.value", filter),
        ],
    )
    .await;
    assert_eq!(subscribed.status, 200, "{}", subscribed.text);
    let subscription = subscribed.element("SubscriptionArn").unwrap().to_owned();

    // The other gateway reads back what the first stored, as written (XML-escaped).
    let read = call(
        &b,
        &key,
        &[("Action", "GetTopicAttributes"), ("TopicArn", &news)],
    )
    .await;
    assert!(
        read.text
            .contains("<key>Policy</key><value>{ &quot;Statement&quot;: [] }</value>"),
        "{}",
        read.text
    );
    let read = call(
        &b,
        &key,
        &[
            ("Action", "GetSubscriptionAttributes"),
            ("SubscriptionArn", &subscription),
        ],
    )
    .await;
    assert!(
        read.text.contains(
            "<key>FilterPolicy</key><value>{&quot;color&quot;: [&quot;red&quot;]}</value>"
        ),
        "{}",
        read.text
    );
    for color in ["blue", "red"] {
        let published = call(
            &b,
            &key,
            &[
                ("Action", "Publish"),
                ("TopicArn", &news),
                ("Message", color),
                ("MessageAttributes.entry.1.Name", "color"),
                ("MessageAttributes.entry.1.Value.DataType", "String"),
                ("MessageAttributes.entry.1.Value.StringValue", color),
            ],
        )
        .await;
        assert_eq!(published.status, 200, "{}", published.text);
    }
    let got = envelopes(&receive(&a, &rest, "q", 1).await);
    let envelope = got.values().next().unwrap();
    assert_eq!(envelope["Message"], "red");
    assert_eq!(envelope["TopicArn"], news.as_str());
}

async fn call(server: &Server, key: &(String, String), pairs: &[(&str, &str)]) -> AwsAnswer {
    let mut all = vec![("Version", "2010-03-31")];
    all.extend_from_slice(pairs);
    signed_post(
        server,
        (&key.0, &key.1),
        "sns",
        &form(&all),
        SystemTime::now(),
    )
    .await
}

/// The Rust SDK (`aws-sdk-sns`) makes a topic, subscribes two queues (one raw with a filter
/// policy, one enveloped), publishes one message and a batch, and lists the subscriptions; the
/// copies arrive over REST as the subscriptions say.
#[tokio::test]
async fn the_rust_sdk_publishes_to_filtered_and_enveloped_subscriptions() {
    use aws_sdk_sns::config::{BehaviorVersion, Credentials, Region};
    use aws_sdk_sns::types::{MessageAttributeValue, PublishBatchRequestEntry};
    let server = Server::start();
    let account = tenant_account(&server, "rust-sns").await;
    let key = key_pair(
        &server,
        "rust-sns",
        json!(["topics:manage", "topics:publish"]),
    )
    .await;
    let token = tenant_token("rust-sns");
    for queue in ["raw-big", "all"] {
        let (status, answer) = server
            .call(Method::PUT, &format!("/v1/queues/{queue}"), &token, None)
            .await;
        assert_eq!(status, 201, "{answer}");
    }
    let config = aws_sdk_sns::Config::builder()
        .behavior_version(BehaviorVersion::latest())
        .region(Region::new("us-east-1"))
        .endpoint_url(&server.base)
        .credentials_provider(Credentials::new(&key.0, &key.1, None, None, "e2e"))
        .http_client(aws_smithy_http_client::Builder::new().build_http())
        .build();
    let sns = aws_sdk_sns::Client::from_conf(config);

    let topic = sns
        .create_topic()
        .name("orders")
        .send()
        .await
        .unwrap()
        .topic_arn
        .unwrap();
    assert_eq!(topic, format!("arn:aws:sns:us-east-1:{account}:orders"));
    let queue_arn = |queue: &str| format!("arn:aws:sqs:us-east-1:{account}:{queue}");
    let raw = sns
        .subscribe()
        .topic_arn(&topic)
        .protocol("sqs")
        .endpoint(queue_arn("raw-big"))
        .attributes("RawMessageDelivery", "true")
        .attributes("FilterPolicy", r#"{"amount": [{"numeric": [">=", 100]}]}"#)
        .return_subscription_arn(true)
        .send()
        .await
        .unwrap()
        .subscription_arn
        .unwrap();
    assert!(raw.starts_with(&format!("{topic}:")), "{raw}");
    sns.subscribe()
        .topic_arn(&topic)
        .protocol("sqs")
        .endpoint(queue_arn("all"))
        .send()
        .await
        .unwrap();

    let amount = |n: &str| {
        MessageAttributeValue::builder()
            .data_type("Number")
            .string_value(n)
            .build()
            .unwrap()
    };
    let published = sns
        .publish()
        .topic_arn(&topic)
        .message("order 1")
        .subject("big")
        .message_attributes("amount", amount("300"))
        .send()
        .await
        .unwrap();
    let first_id = published.message_id.unwrap();
    let batch = sns
        .publish_batch()
        .topic_arn(&topic)
        .publish_batch_request_entries(
            PublishBatchRequestEntry::builder()
                .id("small")
                .message("order 2")
                .message_attributes("amount", amount("5"))
                .build()
                .unwrap(),
        )
        .publish_batch_request_entries(
            PublishBatchRequestEntry::builder()
                .id("big")
                .message("order 3")
                .message_attributes("amount", amount("100"))
                .build()
                .unwrap(),
        )
        .send()
        .await
        .unwrap();
    assert_eq!(batch.successful().len(), 2, "{batch:?}");
    assert!(batch.failed().is_empty(), "{batch:?}");

    let listed = sns
        .list_subscriptions_by_topic()
        .topic_arn(&topic)
        .send()
        .await
        .unwrap();
    let mut endpoints: Vec<String> = listed
        .subscriptions()
        .iter()
        .filter_map(|s| s.endpoint().map(str::to_owned))
        .collect();
    endpoints.sort();
    assert_eq!(endpoints, [queue_arn("all"), queue_arn("raw-big")]);

    // Raw copies: the bodies as published, the attribute kept; only amounts >= 100.
    let mut bodies: Vec<String> = receive(&server, &token, "raw-big", 2)
        .await
        .iter()
        .map(|m| {
            assert_eq!(m["attributes"]["amount"]["type"], "Number", "{m}");
            m["body"].as_str().unwrap().to_owned()
        })
        .collect();
    bodies.sort();
    assert_eq!(bodies, ["order 1", "order 3"]);
    // Enveloped copies of all three, the first with its subject and message id.
    let all = envelopes(&receive(&server, &token, "all", 3).await);
    let first = &all[&first_id];
    assert_eq!(first["Message"], "order 1");
    assert_eq!(first["Subject"], "big");
    assert_eq!(first["TopicArn"], topic.as_str());
}

/// The limits on stored attributes (`aws_sns_limits.py`): `Policy` 30 KiB, `DisplayName` 100
/// characters, `DeliveryPolicy` 30 KiB, ARNs 2 KiB, on topics and subscriptions, each refused
/// with `InvalidParameter` naming the attribute and changing nothing. Skipped where boto3 is
/// not installed.
#[tokio::test]
async fn stored_attributes_are_bounded_as_sns_bounds_them() {
    let server = Server::start();
    let account = tenant_account(&server, "limits").await;
    let full = key_pair(
        &server,
        "limits",
        json!(["topics:manage", "topics:publish"]),
    )
    .await;
    put(&server, &tenant_token("limits"), "/v1/queues/lq").await;
    let script = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../tests/e2e/aws_sns_limits.py"
    );
    let args = vec![script.to_owned(), server.url(""), account];
    let Some(output) = tool("python3", args, &full).await else {
        eprintln!("skipped: python3 is not installed");
        return;
    };
    let stderr = String::from_utf8_lossy(&output.stderr);
    if !output.status.success() && stderr.contains("No module named 'boto3'") {
        eprintln!("skipped: boto3 is not installed");
        return;
    }
    assert!(output.status.success(), "aws_sns_limits.py: {stderr}");
    assert_eq!(String::from_utf8_lossy(&output.stdout).trim(), "ok");
}
