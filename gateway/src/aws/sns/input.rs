//! The typed inputs of the SNS actions, read from a request's Query parameters: every name,
//! list and map as AWS's SNS model spells it, every malformed value refused naming its
//! parameter. What the values mean (ARNs, attributes) is the handlers' business.

use super::error::SnsError;
use crate::aws::query::Params;
use sluice_engine::MessageAttribute;
use std::collections::BTreeMap;

/// `CreateTopic`.
#[derive(Debug, Clone)]
pub struct CreateTopic {
    /// The topic's name.
    pub name: String,
    /// `Attributes.entry.N.key` / `.value`.
    pub attributes: BTreeMap<String, String>,
    /// `Tags.member.N.Key` / `.Value`.
    pub tags: BTreeMap<String, String>,
}

/// `SetTopicAttributes` and `SetSubscriptionAttributes`: one attribute.
#[derive(Debug, Clone)]
pub struct SetAttribute {
    /// `TopicArn` or `SubscriptionArn`.
    pub arn: String,
    /// `AttributeName`.
    pub name: String,
    /// `AttributeValue` (absent reads as empty).
    pub value: String,
}

/// `Subscribe`.
#[derive(Debug, Clone)]
pub struct Subscribe {
    /// `TopicArn`.
    pub topic_arn: String,
    /// `Protocol`.
    pub protocol: String,
    /// `Endpoint`.
    pub endpoint: Option<String>,
    /// `Attributes.entry.N.key` / `.value`.
    pub attributes: BTreeMap<String, String>,
}

/// `Publish`, and each entry of `PublishBatch`.
#[derive(Debug, Clone, Default)]
pub struct Publish {
    /// `Message`.
    pub message: String,
    /// `Subject`.
    pub subject: Option<String>,
    /// `MessageStructure` (`json`).
    pub structure: Option<String>,
    /// `MessageAttributes.entry.N.Name` / `.Value.DataType` / `.Value.StringValue` /
    /// `.Value.BinaryValue`.
    pub attributes: BTreeMap<String, MessageAttribute>,
    /// `MessageGroupId`.
    pub group_id: Option<String>,
    /// `MessageDeduplicationId`.
    pub deduplication_id: Option<String>,
}

/// One entry of `PublishBatch`: its id and its message, or why the message is malformed
/// (which fails the entry alone).
#[derive(Debug, Clone)]
pub struct BatchEntry {
    /// `Id`.
    pub id: String,
    /// The message.
    pub message: Result<Publish, SnsError>,
}

/// Reads a map whose entries are `prefix.entry.N.key` / `.value` (SNS's attribute maps).
pub fn attribute_map(params: &Params, prefix: &str) -> Result<BTreeMap<String, String>, SnsError> {
    Ok(params.map(prefix, "key", "value")?.into_iter().collect())
}

impl CreateTopic {
    /// Reads the parameters.
    pub fn parse(params: &Params) -> Result<Self, SnsError> {
        Ok(Self {
            name: params.required("Name")?.to_owned(),
            attributes: attribute_map(params, "Attributes")?,
            tags: tags(params, "Tags")?,
        })
    }
}

/// A tag list, `prefix.member.N.Key` / `.Value`.
pub fn tags(params: &Params, prefix: &str) -> Result<BTreeMap<String, String>, SnsError> {
    Ok(params.map(prefix, "Key", "Value")?.into_iter().collect())
}

impl SetAttribute {
    /// Reads the parameters; `arn` names the resource's parameter.
    pub fn parse(params: &Params, arn: &str) -> Result<Self, SnsError> {
        Ok(Self {
            arn: params.required(arn)?.to_owned(),
            name: params.required("AttributeName")?.to_owned(),
            value: params.get("AttributeValue").unwrap_or_default().to_owned(),
        })
    }
}

impl Subscribe {
    /// Reads the parameters.
    pub fn parse(params: &Params) -> Result<Self, SnsError> {
        Ok(Self {
            topic_arn: params.required("TopicArn")?.to_owned(),
            protocol: params.required("Protocol")?.to_owned(),
            endpoint: params.get("Endpoint").map(str::to_owned),
            attributes: attribute_map(params, "Attributes")?,
        })
    }
}

impl Publish {
    /// Reads one message's parameters (those of `Publish`, or of a batch entry without its
    /// prefix).
    pub fn parse(params: &Params) -> Result<Self, SnsError> {
        let message = params.get("Message").unwrap_or_default();
        if message.is_empty() {
            return Err(SnsError::invalid("Message", "Empty message"));
        }
        let mut attributes = BTreeMap::new();
        for entry in params.structs("MessageAttributes")? {
            let name = entry.required("Name")?;
            let data_type = entry.required("Value.DataType")?;
            let value = if data_type.starts_with("Binary") {
                entry.required("Value.BinaryValue")?
            } else {
                entry.get("Value.StringValue").ok_or_else(|| {
                    SnsError::invalid(
                        &entry.field_name("Value.StringValue"),
                        format!("a {data_type} attribute needs a StringValue"),
                    )
                })?
            };
            let attribute = MessageAttribute {
                data_type: data_type.to_owned(),
                value: value.to_owned(),
            };
            if attributes.insert(name.to_owned(), attribute).is_some() {
                return Err(SnsError::invalid(
                    &entry.field_name("Name"),
                    format!("the attribute {name:?} is given more than once"),
                ));
            }
        }
        Ok(Self {
            message: message.to_owned(),
            subject: params.get("Subject").map(str::to_owned),
            structure: params.get("MessageStructure").map(str::to_owned),
            attributes,
            group_id: params.get("MessageGroupId").map(str::to_owned),
            deduplication_id: params.get("MessageDeduplicationId").map(str::to_owned),
        })
    }
}

impl BatchEntry {
    /// The entries of `PublishBatchRequestEntries`, each read as a [`Publish`] of its own.
    pub fn parse_all(params: &Params) -> Result<Vec<Self>, SnsError> {
        params
            .structs("PublishBatchRequestEntries")?
            .into_iter()
            .map(|entry| {
                let id = entry.required("Id")?.to_owned();
                let fields = Params::new(entry.fields().map(|field| {
                    (
                        field.to_owned(),
                        entry.get(field).unwrap_or_default().to_owned(),
                    )
                }));
                Ok(Self {
                    id,
                    message: Publish::parse(&fields),
                })
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params(pairs: &[(&str, &str)]) -> Params {
        Params::new(pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())))
    }

    #[test]
    fn publish_reads_typed_attributes_and_names_what_is_missing() {
        let p = params(&[
            ("Message", "hi"),
            ("MessageAttributes.entry.1.Name", "color"),
            ("MessageAttributes.entry.1.Value.DataType", "String"),
            ("MessageAttributes.entry.1.Value.StringValue", "red"),
            ("MessageAttributes.entry.2.Name", "blob"),
            ("MessageAttributes.entry.2.Value.DataType", "Binary"),
            ("MessageAttributes.entry.2.Value.BinaryValue", "AAE="),
        ]);
        let publish = Publish::parse(&p).unwrap();
        assert_eq!(publish.attributes["color"].value, "red");
        assert_eq!(publish.attributes["blob"].data_type, "Binary");
        let missing = params(&[
            ("Message", "hi"),
            ("MessageAttributes.entry.1.Name", "n"),
            ("MessageAttributes.entry.1.Value.DataType", "Number"),
        ]);
        let (_, code, _, message) = Publish::parse(&missing).unwrap_err().classify();
        assert_eq!(code, "InvalidParameter");
        assert!(
            message.contains("MessageAttributes.1.Value.StringValue"),
            "{message}"
        );
        assert!(Publish::parse(&params(&[])).is_err());
    }

    #[test]
    fn batch_entries_fail_on_their_own() {
        let p = params(&[
            ("PublishBatchRequestEntries.member.1.Id", "a"),
            ("PublishBatchRequestEntries.member.1.Message", "x"),
            ("PublishBatchRequestEntries.member.1.MessageGroupId", "g"),
            ("PublishBatchRequestEntries.member.2.Id", "b"),
        ]);
        let entries = BatchEntry::parse_all(&p).unwrap();
        assert_eq!(entries.len(), 2);
        let first = entries[0].message.as_ref().unwrap();
        assert_eq!(
            (first.message.as_str(), first.group_id.as_deref()),
            ("x", Some("g"))
        );
        assert!(entries[1].message.is_err());
    }
}
