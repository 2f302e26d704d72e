//! SNS's `Publish` and `PublishBatch`, on the topic services: the message, its subject and
//! typed attributes, FIFO group and deduplication ids; `MessageStructure=json` delivers the
//! JSON's `sqs` text (or its `default`), as SNS does for queue subscribers.

use super::error::SnsError;
use super::input::{BatchEntry, Publish};
use super::Context;
use crate::aws::query::{Params, XmlAnswer};
use serde_json::Value;
use sluice_engine::message_size;
use sluice_services::{PublishEntry, PublishRequest, MAX_BATCH_ENTRIES};
use std::collections::HashSet;

/// The services' request for one message.
fn request(input: Publish, parameter: &str) -> Result<PublishRequest, SnsError> {
    let body = match input.structure.as_deref() {
        None => input.message,
        Some("json") => per_protocol_message(&input.message, parameter)?,
        Some(other) => {
            return Err(SnsError::invalid(
                "MessageStructure",
                format!("must be json, got {other:?}"),
            ))
        }
    };
    Ok(PublishRequest {
        body,
        attributes: input.attributes,
        subject: input.subject,
        group_id: input.group_id,
        deduplication_id: input.deduplication_id,
    })
}

/// The text a queue subscriber gets of a `MessageStructure=json` message: its `sqs` entry, or
/// its `default` one, which SNS requires.
fn per_protocol_message(message: &str, parameter: &str) -> Result<String, SnsError> {
    let parsed: Value = serde_json::from_str(message).map_err(|_| {
        SnsError::invalid(
            parameter,
            "Message Structure - JSON message body failed to parse",
        )
    })?;
    let default = parsed
        .get("default")
        .and_then(Value::as_str)
        .ok_or_else(|| {
            SnsError::invalid(
                parameter,
                "Message Structure - No default entry in JSON message body",
            )
        })?;
    Ok(parsed
        .get("sqs")
        .and_then(Value::as_str)
        .unwrap_or(default)
        .to_owned())
}

/// `Publish` to `TopicArn` (or `TargetArn` naming a topic).
pub async fn publish(
    cx: &Context<'_>,
    action: &str,
    params: &Params,
) -> Result<XmlAnswer, SnsError> {
    if params.get("PhoneNumber").is_some() {
        return Err(SnsError::invalid(
            "PhoneNumber",
            "SMS is not served; publish to a topic",
        ));
    }
    let (parameter, arn) = match (params.get("TopicArn"), params.get("TargetArn")) {
        (Some(arn), _) => ("TopicArn", arn),
        (None, Some(arn)) => ("TargetArn", arn),
        (None, None) => {
            return Err(SnsError::invalid(
                "TopicArn or TargetArn",
                "one of them is required",
            ))
        }
    };
    let topic = cx.home.topic_name(parameter, arn)?;
    let message = request(Publish::parse(params)?, "Message")?;
    let result = cx.services.publish(cx.tenant, topic, message).await?;
    let mut answer = XmlAnswer::new("sns", action);
    answer.element("MessageId", &result.message_id);
    if let Some(seq) = &result.sequence_number {
        answer.element("SequenceNumber", seq);
    }
    Ok(answer)
}

fn valid_entry_id(id: &str) -> bool {
    (1..=80).contains(&id.len())
        && id
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
}

/// `PublishBatch`: up to ten entries, each published or failed on its own.
pub async fn publish_batch(
    cx: &Context<'_>,
    action: &str,
    params: &Params,
) -> Result<XmlAnswer, SnsError> {
    let topic = cx
        .home
        .topic_name("TopicArn", params.required("TopicArn")?)?;
    let entries = BatchEntry::parse_all(params)?;
    if entries.is_empty() {
        return Err(SnsError::EmptyBatchRequest);
    }
    if entries.len() > MAX_BATCH_ENTRIES {
        return Err(SnsError::TooManyEntriesInBatchRequest(entries.len()));
    }
    let mut seen = HashSet::new();
    for entry in &entries {
        if !valid_entry_id(&entry.id) {
            return Err(SnsError::InvalidBatchEntryId(entry.id.clone()));
        }
        if !seen.insert(entry.id.as_str()) {
            return Err(SnsError::BatchEntryIdsNotDistinct(entry.id.clone()));
        }
    }
    let mut failed: Vec<(String, SnsError)> = Vec::new();
    let mut valid = Vec::new();
    for (index, entry) in entries.into_iter().enumerate() {
        let parameter = format!("PublishBatchRequestEntries.member.{}.Message", index + 1);
        match entry.message.and_then(|m| request(m, &parameter)) {
            Ok(message) => valid.push(PublishEntry {
                id: entry.id,
                message,
            }),
            Err(error) => failed.push((entry.id, error)),
        }
    }
    let size: usize = valid
        .iter()
        .map(|e| message_size(&e.message.body, &e.message.attributes))
        .sum();
    let limit = cx.services.limits().max_message_bytes;
    if size > limit as usize {
        return Err(SnsError::BatchRequestTooLong { size, limit });
    }
    let mut successful = Vec::new();
    if valid.is_empty() {
        // Nothing to publish, but a missing topic is still the answer.
        cx.services.get_topic(cx.tenant, topic).await?;
    } else {
        let outcome = cx.services.publish_batch(cx.tenant, topic, valid).await?;
        successful = outcome.successful;
        failed.extend(
            outcome
                .failed
                .into_iter()
                .map(|f| (f.id, SnsError::from(f.error))),
        );
    }
    let mut answer = XmlAnswer::new("sns", action);
    answer.open("Successful");
    for (id, result) in &successful {
        answer
            .open("member")
            .element("Id", id)
            .element("MessageId", &result.message_id);
        if let Some(seq) = &result.sequence_number {
            answer.element("SequenceNumber", seq);
        }
        answer.close();
    }
    answer.close().open("Failed");
    for (id, error) in &failed {
        let (_, code, sender, message) = error.classify();
        answer
            .open("member")
            .element("Id", id)
            .element("Code", code)
            .element("Message", &message)
            .element("SenderFault", if sender { "true" } else { "false" })
            .close();
    }
    answer.close();
    Ok(answer)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_structure_delivers_the_sqs_text_or_the_default() {
        assert_eq!(
            per_protocol_message(r#"{"default":"d","sqs":"q"}"#, "Message").unwrap(),
            "q"
        );
        assert_eq!(
            per_protocol_message(r#"{"default":"d","email":"e"}"#, "Message").unwrap(),
            "d"
        );
        assert!(per_protocol_message(r#"{"sqs":"q"}"#, "Message").is_err());
        assert!(per_protocol_message("not json", "Message").is_err());
    }
}
