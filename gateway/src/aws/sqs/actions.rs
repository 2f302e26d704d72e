//! The SQS actions: each decodes its typed input from AWS's JSON shape, calls the services the
//! REST API calls, and answers its typed output. Queue semantics stay in the services; what is
//! here is naming (queue URLs and ARNs of the caller's account, attribute names) and shape.

use super::attributes::{self, Names};
use super::error::attribute_error;
use super::{Operation, SqsError};
use crate::aws::{AwsCaller, AwsError};
use crate::state::AppState;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use sluice_engine::{MessageAttribute, TenantId};
use sluice_services::{
    BatchFailure, ChangeVisibilityEntry, DeleteEntry, MessageView, QueueConfigPatch,
    ReceiveRequest, RedriveStatus, RedriveTask, SendEntry, SendRequest, Services,
    MAX_BATCH_ENTRIES,
};
use std::collections::BTreeMap;

/// What every action works with: the services and the caller's account.
struct Ctx<'a> {
    services: &'a Services,
    tenant: TenantId,
    account: &'a str,
    public_url: &'a str,
    arn_prefix: String,
}

/// Runs one decoded action for `caller`, answering its output in AWS's JSON shape.
pub async fn run(
    state: &AppState,
    caller: &AwsCaller,
    operation: Operation,
    input: Value,
) -> Result<Value, SqsError> {
    let scopes = operation.scopes();
    if !scopes
        .iter()
        .any(|scope| caller.key.scopes.iter().any(|s| s == scope.as_str()))
    {
        let names: Vec<&str> = scopes.iter().map(|s| s.as_str()).collect();
        return Err(AwsError::AccessDenied(format!(
            "The access key {} may not call {}: it needs one of the scopes {}",
            caller.key.access_key_id,
            operation.name(),
            names.join(", ")
        ))
        .into());
    }
    let services = &state.services;
    let ctx = Ctx {
        services,
        tenant: caller.key.tenant.clone(),
        account: &caller.account_id,
        public_url: state.public_url.trim_end_matches('/'),
        arn_prefix: format!(
            "arn:aws:sqs:{}:{}:",
            services.aws_region(),
            caller.account_id
        ),
    };
    use Operation as O;
    match operation {
        O::CreateQueue => ctx.create_queue(parse(input)?).await,
        O::GetQueueUrl => ctx.get_queue_url(parse(input)?).await,
        O::ListQueues => ctx.list_queues(parse(input)?).await,
        O::GetQueueAttributes => ctx.get_queue_attributes(parse(input)?).await,
        O::SetQueueAttributes => ctx.set_queue_attributes(parse(input)?).await,
        O::DeleteQueue => ctx.delete_queue(parse(input)?).await,
        O::PurgeQueue => ctx.purge_queue(parse(input)?).await,
        O::SendMessage => ctx.send_message(parse(input)?).await,
        O::SendMessageBatch => ctx.send_message_batch(parse(input)?).await,
        O::ReceiveMessage => ctx.receive_message(parse(input)?, caller).await,
        O::DeleteMessage => ctx.delete_message(parse(input)?).await,
        O::DeleteMessageBatch => ctx.delete_message_batch(parse(input)?).await,
        O::ChangeMessageVisibility => ctx.change_message_visibility(parse(input)?).await,
        O::ChangeMessageVisibilityBatch => ctx.change_message_visibility_batch(parse(input)?).await,
        O::TagQueue => ctx.tag_queue(parse(input)?).await,
        O::UntagQueue => ctx.untag_queue(parse(input)?).await,
        O::ListQueueTags => ctx.list_queue_tags(parse(input)?).await,
        O::ListDeadLetterSourceQueues => ctx.list_dead_letter_source_queues(parse(input)?).await,
        O::AddPermission => ctx.add_permission(parse(input)?).await,
        O::RemovePermission => ctx.remove_permission(parse(input)?).await,
        O::StartMessageMoveTask => ctx.start_message_move_task(parse(input)?).await,
        O::ListMessageMoveTasks => ctx.list_message_move_tasks(parse(input)?).await,
        O::CancelMessageMoveTask => ctx.cancel_message_move_task(parse(input)?).await,
    }
}

fn parse<T: DeserializeOwned>(input: Value) -> Result<T, SqsError> {
    serde_path_to_error::deserialize(input).map_err(|e| {
        let path = e.path().to_string();
        SqsError::Serialization(format!("{path}: {}", e.into_inner()))
    })
}

fn output<T: Serialize>(value: &T) -> Result<Value, SqsError> {
    serde_json::to_value(value).map_err(|e| {
        tracing::error!(error = %e, "an SQS output did not serialize");
        SqsError::Common(AwsError::InternalFailure)
    })
}

fn required<'a>(value: &'a Option<String>, name: &str) -> Result<&'a str, SqsError> {
    match value.as_deref() {
        Some(v) if !v.is_empty() => Ok(v),
        _ => Err(SqsError::MissingParameter(format!(
            "The request must contain the parameter {name}."
        ))),
    }
}

fn in_range(name: &str, value: i64, min: i64, max: i64) -> Result<u32, SqsError> {
    if (min..=max).contains(&value) {
        Ok(value as u32)
    } else {
        Err(SqsError::InvalidParameterValue(format!(
            "Value {value} for parameter {name} is invalid. Reason: must be between {min} and {max}."
        )))
    }
}

/// `VisibilityTimeout` of a visibility change (single or batch entry): required, 0–43200 s.
fn visibility_timeout(value: Option<i64>) -> Result<u32, SqsError> {
    let value = value.ok_or_else(|| {
        SqsError::MissingParameter(
            "The request must contain the parameter VisibilityTimeout.".into(),
        )
    })?;
    in_range("VisibilityTimeout", value, 0, 43_200)
}

#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct QueueUrlInput {
    queue_url: Option<String>,
}

#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct CreateQueueInput {
    queue_name: Option<String>,
    #[serde(default)]
    attributes: BTreeMap<String, String>,
    #[serde(default, rename = "tags")]
    tags: BTreeMap<String, String>,
}

#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct GetQueueUrlInput {
    queue_name: Option<String>,
    queue_owner_a_w_s_account_id: Option<String>,
}

#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct ListQueuesInput {
    queue_name_prefix: Option<String>,
    next_token: Option<String>,
    max_results: Option<i64>,
}

#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct GetQueueAttributesInput {
    queue_url: Option<String>,
    #[serde(default)]
    attribute_names: Vec<String>,
}

#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct SetQueueAttributesInput {
    queue_url: Option<String>,
    attributes: Option<BTreeMap<String, String>>,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "PascalCase")]
struct AttributeValueInput {
    data_type: Option<String>,
    string_value: Option<String>,
    binary_value: Option<String>,
}

#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct SendMessageInput {
    queue_url: Option<String>,
    #[serde(flatten)]
    message: MessageInput,
}

#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct MessageInput {
    message_body: Option<String>,
    delay_seconds: Option<i64>,
    #[serde(default)]
    message_attributes: BTreeMap<String, AttributeValueInput>,
    message_deduplication_id: Option<String>,
    message_group_id: Option<String>,
}

#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct SendBatchEntryInput {
    id: Option<String>,
    #[serde(flatten)]
    message: MessageInput,
}

#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct SendMessageBatchInput {
    queue_url: Option<String>,
    #[serde(default)]
    entries: Vec<SendBatchEntryInput>,
}

#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct ReceiveMessageInput {
    queue_url: Option<String>,
    #[serde(default)]
    attribute_names: Vec<String>,
    #[serde(default)]
    message_system_attribute_names: Vec<String>,
    #[serde(default)]
    message_attribute_names: Vec<String>,
    max_number_of_messages: Option<i64>,
    visibility_timeout: Option<i64>,
    wait_time_seconds: Option<i64>,
    receive_request_attempt_id: Option<String>,
}

#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct DeleteMessageInput {
    queue_url: Option<String>,
    receipt_handle: Option<String>,
}

#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct HandleEntryInput {
    id: Option<String>,
    receipt_handle: Option<String>,
    visibility_timeout: Option<i64>,
}

#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct HandleBatchInput {
    queue_url: Option<String>,
    #[serde(default)]
    entries: Vec<HandleEntryInput>,
}

#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct ChangeVisibilityInput {
    queue_url: Option<String>,
    receipt_handle: Option<String>,
    visibility_timeout: Option<i64>,
}

#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct TagQueueInput {
    queue_url: Option<String>,
    #[serde(default)]
    tags: BTreeMap<String, String>,
}

#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct UntagQueueInput {
    queue_url: Option<String>,
    #[serde(default)]
    tag_keys: Vec<String>,
}

#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct ListSourcesInput {
    queue_url: Option<String>,
    next_token: Option<String>,
    max_results: Option<i64>,
}

#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct AddPermissionInput {
    queue_url: Option<String>,
    label: Option<String>,
    #[serde(default, rename = "AWSAccountIds")]
    aws_account_ids: Vec<String>,
    #[serde(default)]
    actions: Vec<String>,
}

#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct RemovePermissionInput {
    queue_url: Option<String>,
    label: Option<String>,
}

#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct StartMoveInput {
    source_arn: Option<String>,
    destination_arn: Option<String>,
    max_number_of_messages_per_second: Option<i64>,
}

#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct ListMovesInput {
    source_arn: Option<String>,
    max_results: Option<i64>,
}

#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct CancelMoveInput {
    task_handle: Option<String>,
}

/// One failed batch entry, as SQS answers it.
#[derive(Serialize)]
#[serde(rename_all = "PascalCase")]
struct FailedEntry {
    id: String,
    sender_fault: bool,
    code: &'static str,
    message: String,
}

fn failed_entry(id: String, error: SqsError) -> FailedEntry {
    let described = error.describe();
    FailedEntry {
        id,
        sender_fault: described.sender,
        code: described.query_code,
        message: described.message,
    }
}

fn failures(failed: Vec<BatchFailure>) -> Vec<FailedEntry> {
    failed
        .into_iter()
        .map(|f| failed_entry(f.id, f.error.into()))
        .collect()
}

/// Checks a batch's entry count and ids with SQS's codes, before anything else: a failure
/// fails the whole batch.
fn check_batch<'a>(
    ids: impl ExactSizeIterator<Item = Option<&'a str>>,
) -> Result<Vec<String>, SqsError> {
    let count = ids.len();
    if count == 0 {
        return Err(SqsError::EmptyBatchRequest);
    }
    if count > MAX_BATCH_ENTRIES {
        return Err(SqsError::TooManyEntriesInBatchRequest(count));
    }
    let mut seen = std::collections::HashSet::new();
    let mut out = Vec::with_capacity(count);
    for id in ids {
        let id = id.unwrap_or_default();
        if !sluice_services::is_valid_batch_entry_id(id) {
            return Err(SqsError::InvalidBatchEntryId(format!(
                "A batch entry id can only contain alphanumeric characters, hyphens and underscores. It can be at most 80 letters long: {id:?}"
            )));
        }
        if !seen.insert(id) {
            return Err(SqsError::BatchEntryIdsNotDistinct(id.to_owned()));
        }
        out.push(id.to_owned());
    }
    Ok(out)
}

fn message_attributes(
    attributes: BTreeMap<String, AttributeValueInput>,
) -> Result<BTreeMap<String, MessageAttribute>, SqsError> {
    attributes
        .into_iter()
        .map(|(name, value)| {
            let data_type = value.data_type.filter(|t| !t.is_empty()).ok_or_else(|| {
                SqsError::InvalidParameterValue(format!(
                    "The message attribute '{name}' must contain non-empty message attribute type."
                ))
            })?;
            let binary = data_type.starts_with("Binary");
            let value = if binary {
                value.binary_value
            } else {
                value.string_value
            }
            .ok_or_else(|| {
                SqsError::InvalidParameterValue(format!(
                    "The message attribute '{name}' must contain a non-empty {} value.",
                    if binary { "BinaryValue" } else { "StringValue" }
                ))
            })?;
            Ok((name, MessageAttribute { data_type, value }))
        })
        .collect()
}

impl MessageInput {
    /// The bytes of the body and the attributes' names, types and values, roughly as SQS
    /// counts a batch's length (binary values in their base64 form).
    fn size(&self) -> usize {
        let attributes: usize = self
            .message_attributes
            .iter()
            .map(|(name, value)| {
                name.len()
                    + value.data_type.as_deref().map_or(0, str::len)
                    + value.string_value.as_deref().map_or(0, str::len)
                    + value.binary_value.as_deref().map_or(0, str::len)
            })
            .sum();
        self.message_body.as_deref().map_or(0, str::len) + attributes
    }
}

fn send_request(message: MessageInput) -> Result<SendRequest, SqsError> {
    let body = required(&message.message_body, "MessageBody")?.to_owned();
    let delay_seconds = message
        .delay_seconds
        .map(|d| in_range("DelaySeconds", d, 0, 900))
        .transpose()?;
    Ok(SendRequest {
        body,
        attributes: message_attributes(message.message_attributes)?,
        delay_seconds,
        deliver_at: None,
        group_id: message.message_group_id,
        deduplication_id: message.message_deduplication_id,
    })
}

/// The system attributes a receive may ask for.
const MESSAGE_SYSTEM_ATTRIBUTES: [&str; 8] = [
    "SenderId",
    "SentTimestamp",
    "ApproximateReceiveCount",
    "ApproximateFirstReceiveTimestamp",
    "MessageDeduplicationId",
    "MessageGroupId",
    "SequenceNumber",
    "DeadLetterQueueSourceArn",
];

/// Which message attributes a receive answers: `All`/`.*`, names, and prefixes `foo.*`.
fn attribute_selected(selectors: &[String], name: &str) -> bool {
    selectors.iter().any(|s| {
        s == "All"
            || s == ".*"
            || s == name
            || s.strip_suffix(".*").is_some_and(|prefix| {
                name.starts_with(prefix) && name[prefix.len()..].starts_with('.')
            })
    })
}

impl Ctx<'_> {
    fn url(&self, queue: &str) -> String {
        format!("{}/{}/{queue}", self.public_url, self.account)
    }

    fn names(&self) -> Names {
        Names {
            arn_prefix: self.arn_prefix.clone(),
        }
    }

    /// The queue a queue URL names: `{any scheme and host}/{account}/{queue}`. Another
    /// account's URL names no queue of the caller's.
    fn queue(&self, url: &Option<String>) -> Result<String, SqsError> {
        let url = required(url, "QueueUrl")?;
        let path = match url.split_once("://") {
            Some((_, rest)) => rest.find('/').map_or("", |i| &rest[i..]),
            None => url,
        };
        let mut parts = path.trim_matches('/').split('/');
        match (parts.next(), parts.next(), parts.next()) {
            (Some(account), Some(queue), None) if account == self.account && !queue.is_empty() => {
                Ok(queue.to_owned())
            }
            _ => Err(SqsError::QueueDoesNotExist),
        }
    }

    /// The queue an ARN of the caller's account names.
    fn queue_of_arn(&self, arn: &Option<String>, name: &str) -> Result<String, SqsError> {
        let arn = required(arn, name)?;
        arn.strip_prefix(&self.arn_prefix)
            .filter(|q| !q.is_empty() && !q.contains(':'))
            .map(str::to_owned)
            .ok_or(SqsError::QueueDoesNotExist)
    }

    async fn create_queue(&self, input: CreateQueueInput) -> Result<Value, SqsError> {
        let name = required(&input.queue_name, "QueueName")?.to_owned();
        let parsed = attributes::parse(&input.attributes, &self.names())?;
        match parsed.fifo {
            Some(true) if !name.ends_with(".fifo") => {
                return Err(SqsError::InvalidParameterValue(
                    "The name of a FIFO queue can only include alphanumeric characters, hyphens, or underscores, must end with .fifo suffix and be 1 to 80 in length.".into(),
                ))
            }
            Some(false) if name.ends_with(".fifo") => {
                return Err(SqsError::InvalidParameterValue(
                    "Can only include alphanumeric characters, hyphens, or underscores. 1 to 80 in length; only a FIFO queue's name ends with .fifo.".into(),
                ))
            }
            _ => {}
        }
        match self.services.get_queue(&self.tenant, &name).await {
            Ok(view) => {
                let opaque = self
                    .services
                    .opaque_queue_attributes(&self.tenant, &name, view.created_at)
                    .await?;
                let current = attributes::all(&view, &opaque, &self.names());
                if !attributes::agree(&input.attributes, &current) {
                    return Err(SqsError::QueueNameExists(format!(
                        "A queue already exists with the same name and a different value for attribute(s) {}",
                        input
                            .attributes
                            .iter()
                            .filter(|(k, v)| !attributes::agree(
                                &BTreeMap::from([((*k).clone(), (*v).clone())]),
                                &current
                            ))
                            .map(|(k, _)| k.as_str())
                            .collect::<Vec<_>>()
                            .join(", ")
                    )));
                }
            }
            Err(sluice_services::ServiceError::QueueNotFound) => {
                let mut patch = parsed.patch;
                if !input.tags.is_empty() {
                    patch.tags = Some(input.tags);
                }
                let (view, _) = self
                    .services
                    .put_queue(&self.tenant, &name, patch)
                    .await
                    .map_err(attribute_error)?;
                let opaque: BTreeMap<_, _> = parsed
                    .opaque
                    .into_iter()
                    .filter(|(_, v)| v.is_some())
                    .collect();
                if !opaque.is_empty() {
                    self.services
                        .update_opaque_queue_attributes(
                            &self.tenant,
                            &name,
                            view.created_at,
                            opaque,
                        )
                        .await?;
                }
            }
            Err(error) => return Err(error.into()),
        }
        Ok(json!({ "QueueUrl": self.url(&name) }))
    }

    async fn get_queue_url(&self, input: GetQueueUrlInput) -> Result<Value, SqsError> {
        let name = required(&input.queue_name, "QueueName")?;
        if input
            .queue_owner_a_w_s_account_id
            .as_deref()
            .is_some_and(|owner| owner != self.account)
        {
            return Err(SqsError::QueueDoesNotExist);
        }
        self.services.get_queue(&self.tenant, name).await?;
        Ok(json!({ "QueueUrl": self.url(name) }))
    }

    async fn list_queues(&self, input: ListQueuesInput) -> Result<Value, SqsError> {
        let limit = input
            .max_results
            .map(|n| in_range("MaxResults", n, 1, 1000))
            .transpose()?;
        let page = self
            .services
            .list_queues(
                &self.tenant,
                input.queue_name_prefix.as_deref().unwrap_or_default(),
                Some(limit.unwrap_or(1000)),
                input.next_token.as_deref(),
            )
            .await
            .map_err(|e| match e {
                sluice_services::ServiceError::Validation { .. } => {
                    SqsError::InvalidParameterValue("Invalid NextToken value.".into())
                }
                e => e.into(),
            })?;
        let mut out = serde_json::Map::new();
        if !page.queues.is_empty() {
            out.insert(
                "QueueUrls".into(),
                page.queues
                    .iter()
                    .map(|q| Value::String(self.url(q.name.as_str())))
                    .collect(),
            );
        }
        // SQS pages only when asked to.
        if let (Some(_), Some(token)) = (limit, page.next_token) {
            out.insert("NextToken".into(), Value::String(token));
        }
        Ok(Value::Object(out))
    }

    async fn get_queue_attributes(
        &self,
        input: GetQueueAttributesInput,
    ) -> Result<Value, SqsError> {
        let name = self.queue(&input.queue_url)?;
        let view = self.services.get_queue(&self.tenant, &name).await?;
        let opaque = self
            .services
            .opaque_queue_attributes(&self.tenant, &name, view.created_at)
            .await?;
        let all = attributes::all(&view, &opaque, &self.names());
        let known = |n: &str| {
            attributes::OPAQUE.contains(&n)
                || attributes::READ_ONLY.contains(&n)
                || attributes::CONFIGURED.contains(&n)
        };
        for requested in &input.attribute_names {
            if requested != "All" && !known(requested) {
                return Err(SqsError::InvalidAttributeName(format!(
                    "Unknown Attribute {requested}."
                )));
            }
        }
        let selected: BTreeMap<&String, &String> = all
            .iter()
            .filter(|(n, _)| input.attribute_names.iter().any(|r| r == "All" || r == *n))
            .collect();
        if selected.is_empty() {
            return Ok(json!({}));
        }
        Ok(json!({ "Attributes": selected }))
    }

    async fn set_queue_attributes(
        &self,
        input: SetQueueAttributesInput,
    ) -> Result<Value, SqsError> {
        let name = self.queue(&input.queue_url)?;
        let Some(given) = input.attributes else {
            return Err(SqsError::MissingParameter(
                "The request must contain the parameter Attributes.".into(),
            ));
        };
        let parsed = attributes::parse(&given, &self.names())?;
        if parsed.fifo.is_some() {
            return Err(SqsError::InvalidAttributeName(
                "FifoQueue can be set only when a queue is created.".into(),
            ));
        }
        let view = self
            .services
            .patch_queue(&self.tenant, &name, parsed.patch)
            .await
            .map_err(attribute_error)?;
        if !parsed.opaque.is_empty() {
            self.services
                .update_opaque_queue_attributes(&self.tenant, &name, view.created_at, parsed.opaque)
                .await?;
        }
        Ok(json!({}))
    }

    async fn delete_queue(&self, input: QueueUrlInput) -> Result<Value, SqsError> {
        let name = self.queue(&input.queue_url)?;
        self.services.delete_queue(&self.tenant, &name).await?;
        Ok(json!({}))
    }

    async fn purge_queue(&self, input: QueueUrlInput) -> Result<Value, SqsError> {
        let name = self.queue(&input.queue_url)?;
        self.services.purge_queue(&self.tenant, &name).await?;
        Ok(json!({}))
    }

    async fn send_message(&self, input: SendMessageInput) -> Result<Value, SqsError> {
        let name = self.queue(&input.queue_url)?;
        let request = send_request(input.message)?;
        let sent = self.services.send(&self.tenant, &name, request).await?;
        Ok(json!({
            "MessageId": sent.message_id,
            "MD5OfMessageBody": sent.md5_of_body,
            "MD5OfMessageAttributes": sent.md5_of_attributes,
            "SequenceNumber": sent.sequence_number,
        }))
    }

    async fn send_message_batch(&self, input: SendMessageBatchInput) -> Result<Value, SqsError> {
        let name = self.queue(&input.queue_url)?;
        let ids = check_batch(input.entries.iter().map(|e| e.id.as_deref()))?;
        // SQS bounds a batch's bodies and attributes together by the largest message.
        let total: usize = input.entries.iter().map(|e| e.message.size()).sum();
        let limit = self.services.limits().max_message_bytes as usize;
        if total > limit {
            return Err(SqsError::BatchRequestTooLong(format!(
                "Batch requests cannot be longer than {limit} bytes. You have sent {total} bytes."
            )));
        }
        let mut failed = Vec::new();
        let mut entries = Vec::new();
        for (id, entry) in ids.into_iter().zip(input.entries) {
            match send_request(entry.message) {
                Ok(message) => entries.push(SendEntry { id, message }),
                Err(error) => failed.push(failed_entry(id, error)),
            }
        }
        let mut successful = Vec::new();
        if !entries.is_empty() {
            let outcome = self
                .services
                .send_batch(&self.tenant, &name, entries)
                .await?;
            for (id, sent) in outcome.successful {
                successful.push(json!({
                    "Id": id,
                    "MessageId": sent.message_id,
                    "MD5OfMessageBody": sent.md5_of_body,
                    "MD5OfMessageAttributes": sent.md5_of_attributes,
                    "SequenceNumber": sent.sequence_number,
                }));
            }
            failed.extend(failures(outcome.failed));
        }
        Ok(json!({ "Successful": successful, "Failed": output(&failed)? }))
    }

    async fn receive_message(
        &self,
        input: ReceiveMessageInput,
        caller: &AwsCaller,
    ) -> Result<Value, SqsError> {
        let name = self.queue(&input.queue_url)?;
        let request = ReceiveRequest {
            max_messages: input
                .max_number_of_messages
                .map(|n| in_range("MaxNumberOfMessages", n, 1, 10))
                .transpose()?,
            visibility_timeout_seconds: input
                .visibility_timeout
                .map(|n| in_range("VisibilityTimeout", n, 0, 43_200))
                .transpose()?,
            wait_seconds: input
                .wait_time_seconds
                .map(|n| in_range("WaitTimeSeconds", n, 0, 20))
                .transpose()?,
            request_attempt_id: input.receive_request_attempt_id,
        };
        let messages = self.services.receive(&self.tenant, &name, request).await?;
        let system: Vec<String> = input
            .attribute_names
            .into_iter()
            .chain(input.message_system_attribute_names)
            .collect();
        let wants = |attribute: &str| system.iter().any(|s| s == "All" || s == attribute);
        let messages: Vec<Value> = messages
            .into_iter()
            .map(|m| self.message(m, &wants, &input.message_attribute_names, caller))
            .collect();
        if messages.is_empty() {
            return Ok(json!({}));
        }
        Ok(json!({ "Messages": messages }))
    }

    fn message(
        &self,
        message: MessageView,
        wants: &dyn Fn(&str) -> bool,
        selectors: &[String],
        caller: &AwsCaller,
    ) -> Value {
        let mut system = BTreeMap::new();
        for attribute in MESSAGE_SYSTEM_ATTRIBUTES {
            if !wants(attribute) {
                continue;
            }
            let value = match attribute {
                "SenderId" => Some(caller.account_id.clone()),
                "SentTimestamp" => Some(message.sent_at.to_string()),
                "ApproximateReceiveCount" => Some(message.receive_count.to_string()),
                "ApproximateFirstReceiveTimestamp" => {
                    message.first_received_at.map(|t| t.to_string())
                }
                "MessageDeduplicationId" => message.deduplication_id.clone(),
                "MessageGroupId" => message.group_id.clone(),
                "SequenceNumber" => message.sequence_number.clone(),
                "DeadLetterQueueSourceArn" => message
                    .dead_letter
                    .as_ref()
                    .map(|d| format!("{}{}", self.arn_prefix, d.source_queue)),
                _ => None,
            };
            if let Some(value) = value {
                system.insert(attribute, value);
            }
        }
        let mut out = json!({
            "MessageId": message.message_id,
            "ReceiptHandle": message.receipt_handle,
            "MD5OfBody": message.md5_of_body,
            "Body": message.body,
        });
        if !system.is_empty() {
            out["Attributes"] = json!(system);
        }
        let selected: BTreeMap<String, MessageAttribute> = message
            .attributes
            .into_iter()
            .filter(|(name, _)| attribute_selected(selectors, name))
            .collect();
        if !selected.is_empty() {
            // The digest covers the attributes answered, as SQS computes it.
            out["MD5OfMessageAttributes"] = json!(sluice_services::md5_of_attributes(&selected));
            let attributes: serde_json::Map<String, Value> = selected
                .into_iter()
                .map(|(name, a)| {
                    let key = if a.data_type.starts_with("Binary") {
                        "BinaryValue"
                    } else {
                        "StringValue"
                    };
                    (name, json!({ "DataType": a.data_type, key: a.value }))
                })
                .collect();
            out["MessageAttributes"] = Value::Object(attributes);
        }
        out
    }

    async fn delete_message(&self, input: DeleteMessageInput) -> Result<Value, SqsError> {
        let name = self.queue(&input.queue_url)?;
        let handle = required(&input.receipt_handle, "ReceiptHandle")?;
        self.services
            .delete_message(&self.tenant, &name, handle)
            .await?;
        Ok(json!({}))
    }

    async fn delete_message_batch(&self, input: HandleBatchInput) -> Result<Value, SqsError> {
        let name = self.queue(&input.queue_url)?;
        let ids = check_batch(input.entries.iter().map(|e| e.id.as_deref()))?;
        let mut failed = Vec::new();
        let mut entries = Vec::new();
        for (id, entry) in ids.into_iter().zip(input.entries) {
            match required(&entry.receipt_handle, "ReceiptHandle") {
                Ok(handle) => entries.push(DeleteEntry {
                    id,
                    receipt_handle: handle.to_owned(),
                }),
                Err(error) => failed.push(failed_entry(id, error)),
            }
        }
        let mut successful = Vec::new();
        if !entries.is_empty() {
            let outcome = self
                .services
                .delete_batch(&self.tenant, &name, entries)
                .await?;
            successful.extend(
                outcome
                    .successful
                    .into_iter()
                    .map(|(id, ())| json!({"Id": id})),
            );
            failed.extend(failures(outcome.failed));
        }
        Ok(json!({ "Successful": successful, "Failed": output(&failed)? }))
    }

    async fn change_message_visibility(
        &self,
        input: ChangeVisibilityInput,
    ) -> Result<Value, SqsError> {
        let name = self.queue(&input.queue_url)?;
        let handle = required(&input.receipt_handle, "ReceiptHandle")?;
        let timeout = visibility_timeout(input.visibility_timeout)?;
        match self
            .services
            .change_visibility(&self.tenant, &name, handle, timeout)
            .await
        {
            Ok(()) => Ok(json!({})),
            Err(sluice_services::ServiceError::ReceiptHandleStale) => {
                Err(SqsError::MessageNotInflight)
            }
            Err(error) => Err(error.into()),
        }
    }

    async fn change_message_visibility_batch(
        &self,
        input: HandleBatchInput,
    ) -> Result<Value, SqsError> {
        let name = self.queue(&input.queue_url)?;
        let ids = check_batch(input.entries.iter().map(|e| e.id.as_deref()))?;
        let mut failed = Vec::new();
        let mut entries = Vec::new();
        for (id, entry) in ids.into_iter().zip(input.entries) {
            let checked = required(&entry.receipt_handle, "ReceiptHandle").and_then(|handle| {
                Ok((
                    handle.to_owned(),
                    visibility_timeout(entry.visibility_timeout)?,
                ))
            });
            match checked {
                Ok((receipt_handle, visibility_timeout_seconds)) => {
                    entries.push(ChangeVisibilityEntry {
                        id,
                        receipt_handle,
                        visibility_timeout_seconds,
                    })
                }
                Err(error) => failed.push(failed_entry(id, error)),
            }
        }
        let mut successful = Vec::new();
        if !entries.is_empty() {
            let outcome = self
                .services
                .change_visibility_batch(&self.tenant, &name, entries)
                .await?;
            successful.extend(
                outcome
                    .successful
                    .into_iter()
                    .map(|(id, ())| json!({"Id": id})),
            );
            failed.extend(outcome.failed.into_iter().map(|f| {
                let error = match f.error {
                    sluice_services::ServiceError::ReceiptHandleStale => {
                        SqsError::MessageNotInflight
                    }
                    other => other.into(),
                };
                failed_entry(f.id, error)
            }));
        }
        Ok(json!({ "Successful": successful, "Failed": output(&failed)? }))
    }

    async fn change_tags(
        &self,
        name: &str,
        change: impl FnOnce(&mut BTreeMap<String, String>),
    ) -> Result<(), SqsError> {
        let view = self.services.get_queue(&self.tenant, name).await?;
        let mut tags = view.config.tags;
        change(&mut tags);
        let patch = QueueConfigPatch {
            tags: Some(tags),
            ..QueueConfigPatch::default()
        };
        self.services.patch_queue(&self.tenant, name, patch).await?;
        Ok(())
    }

    async fn tag_queue(&self, input: TagQueueInput) -> Result<Value, SqsError> {
        let name = self.queue(&input.queue_url)?;
        if input.tags.is_empty() {
            return Err(SqsError::MissingParameter(
                "The request must contain the parameter Tags.".into(),
            ));
        }
        self.change_tags(&name, |tags| tags.extend(input.tags))
            .await?;
        Ok(json!({}))
    }

    async fn untag_queue(&self, input: UntagQueueInput) -> Result<Value, SqsError> {
        let name = self.queue(&input.queue_url)?;
        if input.tag_keys.is_empty() {
            return Err(SqsError::MissingParameter(
                "The request must contain the parameter TagKeys.".into(),
            ));
        }
        self.change_tags(&name, |tags| {
            for key in &input.tag_keys {
                tags.remove(key);
            }
        })
        .await?;
        Ok(json!({}))
    }

    async fn list_queue_tags(&self, input: QueueUrlInput) -> Result<Value, SqsError> {
        let name = self.queue(&input.queue_url)?;
        let view = self.services.get_queue(&self.tenant, &name).await?;
        if view.config.tags.is_empty() {
            return Ok(json!({}));
        }
        Ok(json!({ "Tags": view.config.tags }))
    }

    async fn list_dead_letter_source_queues(
        &self,
        input: ListSourcesInput,
    ) -> Result<Value, SqsError> {
        let name = self.queue(&input.queue_url)?;
        let limit = input
            .max_results
            .map(|n| in_range("MaxResults", n, 1, 1000))
            .transpose()?;
        let sources = self
            .services
            .dead_letter_source_queues(&self.tenant, &name, 1000)
            .await?;
        // The token is the last name answered; the listing is in name order.
        let after = input.next_token.unwrap_or_default();
        let mut rest: Vec<String> = sources
            .into_iter()
            .map(|q| q.as_str().to_owned())
            .filter(|q| q.as_str() > after.as_str())
            .collect();
        let mut out = serde_json::Map::new();
        if let Some(limit) = limit {
            if rest.len() > limit as usize {
                rest.truncate(limit as usize);
                if let Some(last) = rest.last() {
                    out.insert("NextToken".into(), Value::String(last.clone()));
                }
            }
        }
        out.insert(
            "queueUrls".into(),
            rest.iter().map(|q| Value::String(self.url(q))).collect(),
        );
        Ok(Value::Object(out))
    }

    async fn policy_statements(&self, name: &str) -> Result<(i64, Value, Vec<Value>), SqsError> {
        let view = self.services.get_queue(&self.tenant, name).await?;
        let opaque = self
            .services
            .opaque_queue_attributes(&self.tenant, name, view.created_at)
            .await?;
        let policy = opaque
            .get("Policy")
            .and_then(|p| serde_json::from_str::<Value>(p).ok())
            .unwrap_or_else(|| {
                json!({
                    "Version": "2012-10-17",
                    "Id": format!("{}{name}/SQSDefaultPolicy", self.arn_prefix),
                })
            });
        let statements = policy["Statement"].as_array().cloned().unwrap_or_default();
        Ok((view.created_at as i64, policy, statements))
    }

    async fn store_policy(
        &self,
        name: &str,
        created_at: i64,
        mut policy: Value,
        statements: Vec<Value>,
    ) -> Result<(), SqsError> {
        let value = if statements.is_empty() {
            None
        } else {
            policy["Statement"] = Value::Array(statements);
            Some(policy.to_string())
        };
        self.services
            .update_opaque_queue_attributes(
                &self.tenant,
                name,
                created_at as u64,
                BTreeMap::from([("Policy".to_owned(), value)]),
            )
            .await?;
        Ok(())
    }

    async fn add_permission(&self, input: AddPermissionInput) -> Result<Value, SqsError> {
        let name = self.queue(&input.queue_url)?;
        let label = required(&input.label, "Label")?.to_owned();
        if input.aws_account_ids.is_empty() {
            return Err(SqsError::MissingParameter(
                "The request must contain the parameter AWSAccountIds.".into(),
            ));
        }
        if input.actions.is_empty() {
            return Err(SqsError::MissingParameter(
                "The request must contain the parameter Actions.".into(),
            ));
        }
        let (created_at, policy, mut statements) = self.policy_statements(&name).await?;
        if statements.iter().any(|s| s["Sid"] == label.as_str()) {
            return Err(SqsError::InvalidParameterValue(format!(
                "Value {label} for parameter Label is invalid. Reason: Already exists."
            )));
        }
        let principals: Vec<String> = input
            .aws_account_ids
            .iter()
            .map(|a| format!("arn:aws:iam::{a}:root"))
            .collect();
        let actions: Vec<String> = input.actions.iter().map(|a| format!("SQS:{a}")).collect();
        statements.push(json!({
            "Sid": label,
            "Effect": "Allow",
            "Principal": { "AWS": if principals.len() == 1 { json!(principals[0]) } else { json!(principals) } },
            "Action": if actions.len() == 1 { json!(actions[0]) } else { json!(actions) },
            "Resource": format!("{}{name}", self.arn_prefix),
        }));
        self.store_policy(&name, created_at, policy, statements)
            .await?;
        Ok(json!({}))
    }

    async fn remove_permission(&self, input: RemovePermissionInput) -> Result<Value, SqsError> {
        let name = self.queue(&input.queue_url)?;
        let label = required(&input.label, "Label")?.to_owned();
        let (created_at, policy, mut statements) = self.policy_statements(&name).await?;
        let before = statements.len();
        statements.retain(|s| s["Sid"] != label.as_str());
        if statements.len() == before {
            return Err(SqsError::InvalidParameterValue(format!(
                "Value {label} for parameter Label is invalid. Reason: can't find label on existing policy."
            )));
        }
        self.store_policy(&name, created_at, policy, statements)
            .await?;
        Ok(json!({}))
    }

    fn task_entry(&self, task: &RedriveTask) -> Value {
        let status = match task.status {
            RedriveStatus::Running => "RUNNING",
            RedriveStatus::Completed => "COMPLETED",
            RedriveStatus::Cancelled => "CANCELLED",
            RedriveStatus::Failed => "FAILED",
        };
        let mut entry = json!({
            "Status": status,
            "SourceArn": format!("{}{}", self.arn_prefix, task.source),
            "MaxNumberOfMessagesPerSecond": task.max_messages_per_second,
            "ApproximateNumberOfMessagesMoved": task.moved,
            "ApproximateNumberOfMessagesToMove": task.to_move,
            "StartedTimestamp": task.started_at,
        });
        if task.status == RedriveStatus::Running {
            entry["TaskHandle"] = json!(task.id);
        }
        if let Some(destination) = &task.destination {
            entry["DestinationArn"] = json!(format!("{}{destination}", self.arn_prefix));
        }
        if let Some(error) = &task.error {
            entry["FailureReason"] = json!(error);
        }
        entry
    }

    async fn start_message_move_task(&self, input: StartMoveInput) -> Result<Value, SqsError> {
        let source = self.queue_of_arn(&input.source_arn, "SourceArn")?;
        let destination = match &input.destination_arn {
            Some(_) => Some(self.queue_of_arn(&input.destination_arn, "DestinationArn")?),
            None => None,
        };
        let rate = input
            .max_number_of_messages_per_second
            .map(|n| in_range("MaxNumberOfMessagesPerSecond", n, 1, 500))
            .transpose()?;
        let task = self
            .services
            .start_redrive(&self.tenant, &source, destination.as_deref(), rate)
            .await?;
        Ok(json!({ "TaskHandle": task.id }))
    }

    async fn list_message_move_tasks(&self, input: ListMovesInput) -> Result<Value, SqsError> {
        let source = self.queue_of_arn(&input.source_arn, "SourceArn")?;
        let limit = input
            .max_results
            .map(|n| in_range("MaxResults", n, 1, 10))
            .transpose()?
            .unwrap_or(1);
        self.services.get_queue(&self.tenant, &source).await?;
        // SQS lists the most recent tasks first; the services list oldest first.
        let mut tasks = Vec::new();
        let mut token: Option<String> = None;
        loop {
            let page = self
                .services
                .list_redrive_tasks(&self.tenant, Some(&source), Some(100), token.as_deref())
                .await?;
            tasks.extend(page.tasks);
            match page.next_token {
                Some(next) => token = Some(next),
                None => break,
            }
        }
        let results: Vec<Value> = tasks
            .iter()
            .rev()
            .take(limit as usize)
            .map(|t| self.task_entry(t))
            .collect();
        Ok(json!({ "Results": results }))
    }

    async fn cancel_message_move_task(&self, input: CancelMoveInput) -> Result<Value, SqsError> {
        let id = required(&input.task_handle, "TaskHandle")?;
        self.services
            .cancel_redrive_task(&self.tenant, id)
            .await
            .map_err(|e| match e {
                sluice_services::ServiceError::Validation { .. } => {
                    SqsError::ResourceNotFound("The task handle does not exist.".into())
                }
                e => e.into(),
            })?;
        let task = self.services.get_redrive_task(&self.tenant, id).await?;
        Ok(json!({ "ApproximateNumberOfMessagesMoved": task.moved }))
    }
}
