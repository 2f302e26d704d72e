//! SQS's two codecs. Both decode a request into one JSON value of AWS's JSON shape and encode
//! an action's JSON output: the JSON 1.0 codec as is, the Query codec through the flattened
//! names the Query protocol uses (`Attribute.N.Name`, `MessageAttribute.N.Value.StringValue`,
//! `SendMessageBatchRequestEntry.N.Id`, … in; `<Attribute><Name>`, `<Message>`, … out).

use super::{Call, Operation, Protocol, SqsError, VERSION};
use crate::aws::query::error_answer;
use crate::aws::query::{Params, XmlAnswer};
use crate::aws::AwsError;
use crate::error::current_request_id;
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::{Map, Value};

const JSON_CONTENT_TYPE: &str = "application/x-amz-json-1.0";

/// Integer members, which the Query protocol sends as text.
const INTEGER_MEMBERS: [&str; 6] = [
    "MaxNumberOfMessages",
    "WaitTimeSeconds",
    "VisibilityTimeout",
    "DelaySeconds",
    "MaxResults",
    "MaxNumberOfMessagesPerSecond",
];

/// Query lists of scalars: the Query name and the JSON member.
const SCALAR_LISTS: [(&str, &str); 6] = [
    ("AttributeName", "AttributeNames"),
    ("MessageSystemAttributeName", "MessageSystemAttributeNames"),
    ("MessageAttributeName", "MessageAttributeNames"),
    ("TagKey", "TagKeys"),
    ("AWSAccountId", "AWSAccountIds"),
    ("ActionName", "Actions"),
];

/// The Query names of batch entries.
const BATCH_ENTRIES: [&str; 3] = [
    "SendMessageBatchRequestEntry",
    "DeleteMessageBatchRequestEntry",
    "ChangeMessageVisibilityBatchRequestEntry",
];

/// The request's input, in AWS's JSON shape.
pub fn decode(call: &Call, operation: Operation) -> Result<Value, SqsError> {
    let mut input = match call.protocol {
        Protocol::Json => {
            if call.body.is_empty() {
                Value::Object(Map::new())
            } else {
                // The REST API's strict reader: a member repeated in one object is refused
                // rather than read as its last value (another reader, such as an audit log or
                // a proxy, may have read the first).
                use crate::extract::strict;
                let value = strict::from_slice(&call.body).map_err(|error| match error {
                    strict::Error::Syntax(e) => {
                        SqsError::Serialization(format!("the request body is not JSON: {e}"))
                    }
                    strict::Error::Duplicate(path) => SqsError::Serialization(format!(
                        "the request body repeats the member {path} in one object"
                    )),
                })?;
                if !value.is_object() {
                    return Err(SqsError::Serialization(
                        "the request body must be a JSON object".into(),
                    ));
                }
                value
            }
        }
        Protocol::Query => {
            if let Some(version) = call.version.as_deref().filter(|v| *v != VERSION) {
                return Err(AwsError::InvalidAction(format!(
                    "Could not find operation {} for version {version}",
                    operation.name()
                ))
                .into());
            }
            query_to_json(&call.params, operation)?
        }
    };
    // Clients that post to a queue URL may leave `QueueUrl` out: the path names the queue.
    if let Value::Object(members) = &mut input {
        let queue_path = call.path.trim_matches('/');
        if !members.contains_key("QueueUrl") && queue_path.split('/').count() == 2 {
            members.insert("QueueUrl".into(), Value::String(format!("/{queue_path}")));
        }
    }
    Ok(input)
}

fn scalar(name: &str, value: &str) -> Result<Value, SqsError> {
    if INTEGER_MEMBERS.contains(&name) {
        value.trim().parse::<i64>().map(Value::from).map_err(|_| {
            SqsError::InvalidParameterValue(format!(
                "Value {value} for parameter {name} is invalid. Reason: must be an integer."
            ))
        })
    } else {
        Ok(Value::String(value.to_owned()))
    }
}

/// A map of message attributes: `Prefix.N.Name` and `Prefix.N.Value.{DataType,StringValue,
/// BinaryValue}`.
fn message_attributes(params: &Params, prefix: &str) -> Result<Option<Value>, SqsError> {
    let entries = params.structs(prefix)?;
    if entries.is_empty() {
        return Ok(None);
    }
    let mut map = Map::new();
    for entry in entries {
        let name = entry.required("Name")?;
        let mut value = Map::new();
        for field in ["DataType", "StringValue", "BinaryValue"] {
            if let Some(text) = entry.get(&format!("Value.{field}")) {
                value.insert(field.into(), Value::String(text.to_owned()));
            }
        }
        map.insert(name.to_owned(), Value::Object(value));
    }
    Ok(Some(Value::Object(map)))
}

fn query_members(
    params: &Params,
    operation: Option<Operation>,
) -> Result<Map<String, Value>, SqsError> {
    let mut members = Map::new();
    for (key, value) in params_scalars(params) {
        members.insert(key.to_owned(), scalar(key, value)?);
    }
    for (query, json) in SCALAR_LISTS {
        if params.has_list(query) {
            let list = params.list(query)?;
            members.insert(
                json.into(),
                Value::Array(list.into_iter().map(|v| Value::String(v.into())).collect()),
            );
        }
    }
    if params.has_list("Attribute") {
        let map = params.map("Attribute", "Name", "Value")?;
        members.insert("Attributes".into(), string_map(map));
    }
    if params.has_list("Tag") {
        let map = params.map("Tag", "Key", "Value")?;
        // CreateQueue's member is `tags`; TagQueue's `Tags`.
        let name = if operation == Some(Operation::CreateQueue) {
            "tags"
        } else {
            "Tags"
        };
        members.insert(name.into(), string_map(map));
    }
    for (query, json) in [
        ("MessageAttribute", "MessageAttributes"),
        ("MessageSystemAttribute", "MessageSystemAttributes"),
    ] {
        if let Some(map) = message_attributes(params, query)? {
            members.insert(json.into(), map);
        }
    }
    for query in BATCH_ENTRIES {
        if params.has_list(query) {
            let entries = params
                .structs(query)?
                .into_iter()
                .map(|entry| query_members(&entry.params(), None).map(Value::Object))
                .collect::<Result<Vec<_>, _>>()?;
            members.insert("Entries".into(), Value::Array(entries));
        }
    }
    Ok(members)
}

/// The top-level single values. An empty one counts as absent: that is how the Query protocol
/// writes an empty list (`Entries=`), and an empty required value is missing all the same.
fn params_scalars(params: &Params) -> impl Iterator<Item = (&str, &str)> {
    params
        .iter()
        .filter(|(k, v)| !k.contains('.') && !v.is_empty() && *k != "Action" && *k != "Version")
}

fn string_map(pairs: Vec<(String, String)>) -> Value {
    Value::Object(
        pairs
            .into_iter()
            .map(|(k, v)| (k, Value::String(v)))
            .collect(),
    )
}

fn query_to_json(params: &Params, operation: Operation) -> Result<Value, SqsError> {
    query_members(params, Some(operation)).map(Value::Object)
}

/// A successful answer.
pub fn answer(protocol: Protocol, operation: Operation, output: Value) -> Response {
    let request_id = current_request_id();
    match protocol {
        Protocol::Json => {
            let mut output = output;
            strip_nulls(&mut output);
            let mut response = (StatusCode::OK, output.to_string()).into_response();
            let headers = response.headers_mut();
            headers.insert(
                header::CONTENT_TYPE,
                HeaderValue::from_static(JSON_CONTENT_TYPE),
            );
            if let Ok(value) = HeaderValue::from_str(&request_id) {
                headers.insert("x-amzn-requestid", value);
            }
            response
        }
        Protocol::Query => {
            let mut answer = XmlAnswer::new("sqs", operation.name());
            if operation.has_output() {
                answer = answer.with_result();
            }
            if let Value::Object(members) = &output {
                write_members(&mut answer, operation, members);
            }
            answer.finish()
        }
    }
}

/// Drops absent (null) members, which SQS leaves out rather than answering null.
fn strip_nulls(value: &mut Value) {
    match value {
        Value::Object(members) => {
            members.retain(|_, v| !v.is_null());
            members.values_mut().for_each(strip_nulls);
        }
        Value::Array(items) => items.iter_mut().for_each(strip_nulls),
        _ => {}
    }
}

/// The element name of one item of a flattened list or map member.
fn item_name(operation: Operation, member: &str) -> Option<String> {
    Some(match member {
        "QueueUrls" | "queueUrls" => "QueueUrl".into(),
        "Messages" => "Message".into(),
        "Attributes" => "Attribute".into(),
        "Tags" => "Tag".into(),
        "MessageAttributes" => "MessageAttribute".into(),
        "Successful" => format!("{}ResultEntry", operation.name()),
        "Failed" => "BatchResultErrorEntry".into(),
        "Results" => "ListMessageMoveTasksResultEntry".into(),
        _ => return None,
    })
}

fn write_members(answer: &mut XmlAnswer, operation: Operation, members: &Map<String, Value>) {
    for (name, value) in members {
        match (item_name(operation, name), value) {
            (Some(item), Value::Array(items)) => {
                for value in items {
                    write_value(answer, operation, &item, value);
                }
            }
            (Some(item), Value::Object(map)) => {
                let key_name = if name == "Tags" { "Key" } else { "Name" };
                for (key, value) in map {
                    answer.open(&item).element(key_name, key);
                    write_value(answer, operation, "Value", value);
                    answer.close();
                }
            }
            _ => write_value(answer, operation, name, value),
        }
    }
}

fn write_value(answer: &mut XmlAnswer, operation: Operation, name: &str, value: &Value) {
    match value {
        Value::Null => {}
        Value::String(text) => {
            answer.element(name, text);
        }
        Value::Bool(b) => {
            answer.element(name, if *b { "true" } else { "false" });
        }
        Value::Number(n) => {
            answer.element(name, &n.to_string());
        }
        Value::Array(items) => {
            for item in items {
                write_value(answer, operation, name, item);
            }
        }
        Value::Object(members) => {
            answer.open(name);
            write_members(answer, operation, members);
            answer.close();
        }
    }
}

/// An error answer in the request's protocol.
pub fn error_response(protocol: Protocol, error: &SqsError) -> Response {
    let described = error.describe();
    if described.status.is_server_error() {
        tracing::warn!(
            request_id = current_request_id(),
            code = described.query_code,
            "SQS request failed"
        );
    }
    match protocol {
        Protocol::Query => error_answer(
            "sqs",
            described.status,
            described.query_code,
            described.sender,
            &described.message,
        ),
        Protocol::Json => {
            let request_id = current_request_id();
            let body = serde_json::json!({
                "__type": described.json_type,
                "message": described.message,
            });
            let mut response = (described.status, body.to_string()).into_response();
            let headers = response.headers_mut();
            headers.insert(
                header::CONTENT_TYPE,
                HeaderValue::from_static(JSON_CONTENT_TYPE),
            );
            let query_error = format!(
                "{};{}",
                described.query_code,
                if described.sender {
                    "Sender"
                } else {
                    "Receiver"
                }
            );
            if let Ok(value) = HeaderValue::from_str(&query_error) {
                headers.insert("x-amzn-query-error", value);
            }
            if let Ok(value) = HeaderValue::from_str(&request_id) {
                headers.insert("x-amzn-requestid", value);
            }
            response
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn params(pairs: &[(&str, &str)]) -> Params {
        Params::new(pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())))
    }

    #[test]
    fn query_batches_translate_to_the_json_shape_with_nested_attributes() {
        let input = query_to_json(
            &params(&[
                ("Action", "SendMessageBatch"),
                ("QueueUrl", "http://h/1/q"),
                ("SendMessageBatchRequestEntry.1.Id", "a"),
                ("SendMessageBatchRequestEntry.1.MessageBody", "x"),
                ("SendMessageBatchRequestEntry.1.DelaySeconds", "3"),
                (
                    "SendMessageBatchRequestEntry.1.MessageAttribute.1.Name",
                    "k",
                ),
                (
                    "SendMessageBatchRequestEntry.1.MessageAttribute.1.Value.DataType",
                    "String",
                ),
                (
                    "SendMessageBatchRequestEntry.1.MessageAttribute.1.Value.StringValue",
                    "v",
                ),
                ("SendMessageBatchRequestEntry.2.Id", "b"),
                ("SendMessageBatchRequestEntry.2.MessageBody", "y"),
            ]),
            Operation::SendMessageBatch,
        )
        .unwrap();
        assert_eq!(
            input,
            json!({
                "QueueUrl": "http://h/1/q",
                "Entries": [
                    {"Id": "a", "MessageBody": "x", "DelaySeconds": 3,
                     "MessageAttributes": {"k": {"DataType": "String", "StringValue": "v"}}},
                    {"Id": "b", "MessageBody": "y"}
                ]
            })
        );
    }

    #[test]
    fn query_lists_and_maps_take_their_json_names() {
        let create = query_to_json(
            &params(&[
                ("QueueName", "q"),
                ("Attribute.1.Name", "DelaySeconds"),
                ("Attribute.1.Value", "5"),
                ("Tag.1.Key", "env"),
                ("Tag.1.Value", "prod"),
            ]),
            Operation::CreateQueue,
        )
        .unwrap();
        assert_eq!(
            create,
            json!({"QueueName": "q", "Attributes": {"DelaySeconds": "5"}, "tags": {"env": "prod"}})
        );
        let tag = query_to_json(
            &params(&[("Tag.1.Key", "a"), ("Tag.1.Value", "b")]),
            Operation::TagQueue,
        )
        .unwrap();
        assert_eq!(tag, json!({"Tags": {"a": "b"}}));
        let receive = query_to_json(
            &params(&[
                ("AttributeName.1", "All"),
                ("MessageAttributeName.member.1", "foo.*"),
                ("MessageAttributeName.member.2", "bar"),
                ("MaxNumberOfMessages", "10"),
            ]),
            Operation::ReceiveMessage,
        )
        .unwrap();
        assert_eq!(
            receive,
            json!({"AttributeNames": ["All"], "MessageAttributeNames": ["foo.*", "bar"], "MaxNumberOfMessages": 10})
        );
    }

    #[test]
    fn a_json_member_repeated_in_one_object_is_refused() {
        let call = |body: &str| Call {
            protocol: Protocol::Json,
            action: Some("SendMessage".into()),
            version: None,
            body: axum::body::Bytes::from(body.to_owned()),
            params: Params::default(),
            path: "/".into(),
        };
        for (body, path) in [
            (
                r#"{"QueueUrl": "u", "MessageBody": "a", "MessageBody": "b"}"#,
                "MessageBody",
            ),
            (
                r#"{"QueueUrl": "u", "MessageBody": "a", "MessageAttributes": {"k": {"DataType": "String", "StringValue": "1", "StringValue": "2"}}}"#,
                "MessageAttributes.k.StringValue",
            ),
        ] {
            match decode(&call(body), Operation::SendMessage) {
                Err(error @ SqsError::Serialization(_)) => {
                    let described = error.describe();
                    assert_eq!(described.status, StatusCode::BAD_REQUEST);
                    assert_eq!(
                        described.json_type,
                        "com.amazon.coral.service#SerializationException"
                    );
                    assert!(described.message.contains(path), "{}", described.message);
                }
                other => panic!("{body}: {other:?}"),
            }
        }
        let sibling = r#"{"QueueUrl": "u", "MessageBody": "a", "MessageAttributes": {"a": {"DataType": "String"}, "b": {"DataType": "String"}}}"#;
        assert!(decode(&call(sibling), Operation::SendMessage).is_ok());
    }

    #[test]
    fn an_empty_query_list_reads_as_absent() {
        let input = query_to_json(
            &params(&[("QueueUrl", "u"), ("Entries", "")]),
            Operation::SendMessageBatch,
        )
        .unwrap();
        assert_eq!(input, json!({"QueueUrl": "u"}));
    }

    #[test]
    fn malformed_query_values_name_the_parameter() {
        let error = query_to_json(
            &params(&[("WaitTimeSeconds", "soon")]),
            Operation::ReceiveMessage,
        )
        .unwrap_err();
        assert!(
            matches!(&error, SqsError::InvalidParameterValue(m) if m.contains("WaitTimeSeconds")),
            "{error:?}"
        );
        let error = query_to_json(
            &params(&[("MessageAttribute.1.Value.StringValue", "v")]),
            Operation::SendMessage,
        )
        .unwrap_err();
        assert!(
            matches!(&error, SqsError::MissingParameter(m) if m.contains("MessageAttribute.1.Name")),
            "{error:?}"
        );
    }

    #[test]
    fn xml_answers_flatten_lists_and_maps_as_sqs_does() {
        let mut answer = XmlAnswer::new("sqs", "ReceiveMessage");
        let output = json!({"Messages": [{
            "Body": "b",
            "Attributes": {"SentTimestamp": "1"},
            "MessageAttributes": {"k": {"DataType": "String", "StringValue": "v"}},
            "MD5OfMessageAttributes": null
        }]});
        write_members(
            &mut answer,
            Operation::ReceiveMessage,
            output.as_object().unwrap(),
        );
        let document = answer.document();
        assert!(document.contains(
            "<ReceiveMessageResult><Message>\
             <Attribute><Name>SentTimestamp</Name><Value>1</Value></Attribute>\
             <Body>b</Body>\
             <MessageAttribute><Name>k</Name><Value><DataType>String</DataType><StringValue>v</StringValue></Value></MessageAttribute>\
             </Message></ReceiveMessageResult>"
        ), "{document}");
        let mut answer = XmlAnswer::new("sqs", "DeleteMessageBatch");
        let output =
            json!({"Successful": [{"Id": "a"}], "Failed": [{"Id": "b", "SenderFault": true}]});
        write_members(
            &mut answer,
            Operation::DeleteMessageBatch,
            output.as_object().unwrap(),
        );
        let document = answer.document();
        assert!(document.contains(
            "<BatchResultErrorEntry><Id>b</Id><SenderFault>true</SenderFault></BatchResultErrorEntry>\
             <DeleteMessageBatchResultEntry><Id>a</Id></DeleteMessageBatchResultEntry>"
        ), "{document}");
    }

    #[test]
    fn json_answers_leave_absent_members_out() {
        let mut value = json!({"A": null, "B": [{"C": null, "D": 1}]});
        strip_nulls(&mut value);
        assert_eq!(value, json!({"B": [{"D": 1}]}));
    }
}
