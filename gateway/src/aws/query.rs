//! The Query protocol's shared pieces, for every service that speaks it (SQS's Query codec,
//! SNS): [`Params`], the flat `key=value` pairs of a request read as AWS's single values,
//! indexed lists (`Foo.member.N`, `Foo.N`, `Foo.entry.N`) and lists of structures
//! (`Attribute.N.Name`, `MessageAttribute.N.Value.StringValue`, `Tag.N.Key`, …); and
//! [`XmlAnswer`], the writer of `<XResponse><XResult>…</XResult><ResponseMetadata>` answers,
//! which escapes every text it is given.
//!
//! The errors ([`QueryError`]) name the offending parameter; each service maps them onto its
//! own codes (SQS says `InvalidParameterValue`, SNS `InvalidParameter`).

use super::{namespace, xml_escape, xml_response};
use crate::error::current_request_id;
use axum::http::StatusCode;
use axum::response::Response;
use std::collections::BTreeMap;

/// A Query-protocol parameter that is missing or malformed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum QueryError {
    /// A required parameter is absent (or empty).
    #[error("The request must contain the parameter {0}.")]
    Missing(String),
    /// A parameter is present but unusable: a gap or a bad number in a list's indices, a
    /// structure without one of its required fields.
    #[error("Value for parameter {name} is invalid. Reason: {reason}")]
    Invalid {
        /// The parameter, as the client spelled it.
        name: String,
        /// What is wrong with it.
        reason: String,
    },
}

impl QueryError {
    fn invalid(name: impl Into<String>, reason: impl Into<String>) -> Self {
        Self::Invalid {
            name: name.into(),
            reason: reason.into(),
        }
    }
}

/// The parameters of one Query-protocol request (query string and form body together).
///
/// A key given twice keeps its first value, as AWS does not define repeats and clients never
/// send them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Params {
    values: BTreeMap<String, String>,
}

/// The infixes AWS puts between a list's name and its 1-based index: `Foo.member.1` (lists of
/// the Query protocol), `Foo.entry.1` (maps, as SNS sends them) and `Foo.1` (flattened lists).
const LIST_INFIXES: [&str; 3] = ["member.", "entry.", ""];

impl Params {
    /// Collects the pairs of a request.
    pub fn new(pairs: impl IntoIterator<Item = (String, String)>) -> Self {
        let mut values = BTreeMap::new();
        for (key, value) in pairs {
            values.entry(key).or_insert(value);
        }
        Self { values }
    }

    /// The value of `key`, if given (possibly empty).
    pub fn get(&self, key: &str) -> Option<&str> {
        self.values.get(key).map(String::as_str)
    }

    /// Every parameter, by key.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &str)> {
        self.values.iter().map(|(k, v)| (k.as_str(), v.as_str()))
    }

    /// The value of `key`, which must be given and not empty.
    pub fn required(&self, key: &str) -> Result<&str, QueryError> {
        match self.get(key) {
            Some(value) if !value.is_empty() => Ok(value),
            _ => Err(QueryError::Missing(key.to_owned())),
        }
    }

    /// The value of `key` as an integer, if given.
    pub fn integer(&self, key: &str) -> Result<Option<i64>, QueryError> {
        self.get(key)
            .map(|value| {
                value
                    .trim()
                    .parse()
                    .map_err(|_| QueryError::invalid(key, format!("{value:?} is not an integer")))
            })
            .transpose()
    }

    /// The value of `key` as a boolean (`true`/`false`, any case), if given.
    pub fn boolean(&self, key: &str) -> Result<Option<bool>, QueryError> {
        self.get(key)
            .map(|value| match value.to_ascii_lowercase().as_str() {
                "true" => Ok(true),
                "false" => Ok(false),
                _ => Err(QueryError::invalid(
                    key,
                    format!("{value:?} is not a boolean"),
                )),
            })
            .transpose()
    }

    /// Whether any parameter starts with `prefix.` (an empty list counts as absent).
    pub fn has_list(&self, prefix: &str) -> bool {
        let dotted = format!("{prefix}.");
        self.values
            .range(dotted.clone()..)
            .next()
            .is_some_and(|(k, _)| k.starts_with(&dotted))
    }

    /// The scalar list `prefix`: `prefix.member.N` or `prefix.N` for N = 1, 2, … with no gap.
    /// An absent list is empty.
    pub fn list(&self, prefix: &str) -> Result<Vec<&str>, QueryError> {
        let indexed = self.indexed(prefix)?;
        indexed
            .into_iter()
            .map(|(index, fields)| match fields.get("") {
                Some(value) if fields.len() == 1 => Ok(*value),
                _ => Err(QueryError::invalid(
                    format!("{prefix}.{index}"),
                    "a list entry must be a single value",
                )),
            })
            .collect()
    }

    /// The list of structures `prefix`: `prefix.N.Field` (or `prefix.member.N.Field`,
    /// `prefix.entry.N.Field`) for N = 1, 2, … with no gap, each entry's fields keyed by the
    /// path after its index (`Name`, `Value.StringValue`, …). An absent list is empty.
    pub fn structs(&self, prefix: &str) -> Result<Vec<Entry<'_>>, QueryError> {
        self.indexed(prefix)?
            .into_iter()
            .map(|(index, fields)| {
                if fields.contains_key("") {
                    return Err(QueryError::invalid(
                        format!("{prefix}.{index}"),
                        "a list entry must be a structure with named fields",
                    ));
                }
                Ok(Entry {
                    name: format!("{prefix}.{index}"),
                    fields,
                })
            })
            .collect()
    }

    /// A map given as a list of `key_field`/`value_field` structures (`Attribute.N.Name` and
    /// `.Value`, `Tag.N.Key` and `.Value`, SNS's `Attributes.entry.N.key` and `.value`), in
    /// the order given. A key given twice is refused, as is an entry lacking its key; an entry
    /// without a value maps to the empty string (AWS's way of clearing an attribute).
    pub fn map(
        &self,
        prefix: &str,
        key_field: &str,
        value_field: &str,
    ) -> Result<Vec<(String, String)>, QueryError> {
        let mut seen = std::collections::BTreeSet::new();
        self.structs(prefix)?
            .into_iter()
            .map(|entry| {
                let key = entry.required(key_field)?;
                if !seen.insert(key.to_owned()) {
                    return Err(QueryError::invalid(
                        entry.field_name(key_field),
                        format!("{key:?} is given more than once"),
                    ));
                }
                let value = entry.get(value_field).unwrap_or_default();
                Ok((key.to_owned(), value.to_owned()))
            })
            .collect()
    }

    /// The entries of the list `prefix`, by index, each as its fields keyed by the rest of the
    /// path ("" for a scalar entry). Indices must be 1, 2, … without a gap, written without
    /// sign or leading zero, and the list must use one infix.
    fn indexed(&self, prefix: &str) -> Result<BTreeMap<usize, BTreeMap<String, &str>>, QueryError> {
        let dotted = format!("{prefix}.");
        let mut entries: BTreeMap<usize, BTreeMap<String, &str>> = BTreeMap::new();
        let mut infix_used: Option<&str> = None;
        for (key, value) in self
            .values
            .range(dotted.clone()..)
            .take_while(|(k, _)| k.starts_with(&dotted))
        {
            let rest = &key[dotted.len()..];
            let (infix, after) = LIST_INFIXES
                .iter()
                .find_map(|infix| {
                    rest.strip_prefix(infix)
                        .filter(|after| after.starts_with(|c: char| c.is_ascii_digit()))
                        .map(|after| (*infix, after))
                })
                .ok_or_else(|| {
                    QueryError::invalid(key, "expected a 1-based index after the list's name")
                })?;
            if *infix_used.get_or_insert(infix) != infix {
                return Err(QueryError::invalid(
                    key,
                    "the entries of one list must all be written the same way",
                ));
            }
            let (digits, field) = after.split_once('.').unwrap_or((after, ""));
            let index = parse_index(digits).ok_or_else(|| {
                QueryError::invalid(key, format!("{digits:?} is not a 1-based index"))
            })?;
            if field.is_empty() && after.ends_with('.') {
                return Err(QueryError::invalid(
                    key,
                    "the field name after the index is empty",
                ));
            }
            entries
                .entry(index)
                .or_default()
                .insert(field.to_owned(), value.as_str());
        }
        for (position, index) in entries.keys().enumerate() {
            if *index != position + 1 {
                return Err(QueryError::invalid(
                    format!("{prefix}.{}{}", infix_used.unwrap_or_default(), position + 1),
                    format!("the list's indices must run 1, 2, 3, … without a gap; {index} follows {position}"),
                ));
            }
        }
        Ok(entries)
    }
}

fn parse_index(digits: &str) -> Option<usize> {
    if digits.is_empty() || digits.starts_with('0') || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

/// One structure of a list: its fields by the path after its index.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry<'a> {
    name: String,
    fields: BTreeMap<String, &'a str>,
}

impl<'a> Entry<'a> {
    /// The field `field` (`Name`, `Value.StringValue`, …), if given.
    pub fn get(&self, field: &str) -> Option<&'a str> {
        self.fields.get(field).copied()
    }

    /// The field `field`, which must be given and not empty.
    pub fn required(&self, field: &str) -> Result<&'a str, QueryError> {
        match self.get(field) {
            Some(value) if !value.is_empty() => Ok(value),
            _ => Err(QueryError::Missing(self.field_name(field))),
        }
    }

    /// The full parameter name of one of the entry's fields, for error messages.
    pub fn field_name(&self, field: &str) -> String {
        format!("{}.{field}", self.name)
    }

    /// The entry's own name (`Attribute.2`), for error messages.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The entry's fields as parameters of their own, for structures nested in it
    /// (`SendMessageBatchRequestEntry.1.MessageAttribute.1.Name`).
    pub fn params(&self) -> Params {
        Params::new(
            self.fields
                .iter()
                .map(|(k, v)| (k.clone(), (*v).to_owned())),
        )
    }

    /// The names of the fields given, for refusing unknown ones.
    pub fn fields(&self) -> impl Iterator<Item = &str> {
        self.fields.keys().map(String::as_str)
    }
}

/// A Query-protocol XML answer being written: `<{Action}Response xmlns=…>`, then the result
/// element `<{Action}Result>` holding what was written (left out when nothing was, as AWS
/// does for actions without output, unless [`with_result`](Self::with_result) keeps it), then
/// `<ResponseMetadata><RequestId>`.
#[derive(Debug)]
pub struct XmlAnswer {
    service: &'static str,
    action: String,
    body: String,
    open: Vec<String>,
    keep_result: bool,
}

impl XmlAnswer {
    /// An answer to `action` of `service` (`sqs`, `sns`).
    pub fn new(service: &'static str, action: &str) -> Self {
        Self {
            service,
            action: action.to_owned(),
            body: String::new(),
            open: Vec::new(),
            keep_result: false,
        }
    }

    /// Keeps the result element even when it is empty: AWS writes it for every action that
    /// has an output (an empty `ListQueues`, a `ReceiveMessage` without messages), and Query
    /// clients look for it.
    pub fn with_result(mut self) -> Self {
        self.keep_result = true;
        self
    }

    /// `<name>text</name>`, the text escaped.
    pub fn element(&mut self, name: &str, text: &str) -> &mut Self {
        self.body.push('<');
        self.body.push_str(name);
        self.body.push('>');
        self.body.push_str(&xml_escape(text));
        self.body.push_str("</");
        self.body.push_str(name);
        self.body.push('>');
        self
    }

    /// `<name>`, closed by the matching [`close`](Self::close) (or by
    /// [`finish`](Self::finish)).
    pub fn open(&mut self, name: &str) -> &mut Self {
        self.body.push('<');
        self.body.push_str(name);
        self.body.push('>');
        self.open.push(name.to_owned());
        self
    }

    /// Closes the innermost element [`open`](Self::open) left open.
    pub fn close(&mut self) -> &mut Self {
        if let Some(name) = self.open.pop() {
            self.body.push_str("</");
            self.body.push_str(&name);
            self.body.push('>');
        }
        self
    }

    /// The finished document, as text.
    pub fn document(mut self) -> String {
        while !self.open.is_empty() {
            self.close();
        }
        let action = &self.action;
        let result = if self.body.is_empty() && !self.keep_result {
            String::new()
        } else {
            format!("<{action}Result>{}</{action}Result>", self.body)
        };
        format!(
            "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<{action}Response xmlns=\"{}\">{result}\
             <ResponseMetadata><RequestId>{}</RequestId></ResponseMetadata></{action}Response>",
            namespace(self.service),
            xml_escape(&current_request_id()),
        )
    }

    /// The finished answer: 200, `text/xml`, the request id header.
    pub fn finish(self) -> Response {
        let request_id = current_request_id();
        xml_response(StatusCode::OK, self.document(), &request_id)
    }
}

/// The Query protocol's XML error answer, in the namespace of `service`: every service's own
/// codes (SNS's `NotFound`, SQS's `QueueDoesNotExist`, …) and the shared ones of [`AwsError`]
/// are written by this one function.
///
/// [`AwsError`]: super::AwsError
pub fn error_answer(
    service: &str,
    status: StatusCode,
    code: &str,
    sender: bool,
    message: &str,
) -> Response {
    let request_id = current_request_id();
    if service == "ec2" {
        // EC2's Query dialect has an error shape of its own. No EC2 action is served; the
        // shape matters because SDKs retry an error they cannot parse (older Terraform
        // providers ask EC2 for the account's platforms while configuring).
        let body = format!(
            "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Response><Errors><Error>\
             <Code>{}</Code><Message>{}</Message></Error></Errors><RequestID>{}</RequestID>\
             </Response>",
            xml_escape(code),
            xml_escape(message),
            xml_escape(&request_id),
        );
        return xml_response(status, body, &request_id);
    }
    let body = format!(
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<ErrorResponse xmlns=\"{}\">\
         <Error><Type>{}</Type><Code>{}</Code><Message>{}</Message></Error>\
         <RequestId>{}</RequestId></ErrorResponse>",
        namespace(service),
        if sender { "Sender" } else { "Receiver" },
        xml_escape(code),
        xml_escape(message),
        xml_escape(&request_id),
    );
    xml_response(status, body, &request_id)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params(pairs: &[(&str, &str)]) -> Params {
        Params::new(pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())))
    }

    #[test]
    fn single_values_keep_the_first_of_repeats_and_required_refuses_empty() {
        let p = params(&[("QueueName", "a"), ("QueueName", "b"), ("Empty", "")]);
        assert_eq!(p.get("QueueName"), Some("a"));
        assert_eq!(p.required("QueueName"), Ok("a"));
        assert_eq!(p.get("Empty"), Some(""));
        assert_eq!(
            p.required("Empty"),
            Err(QueryError::Missing("Empty".into()))
        );
        assert_eq!(
            p.required("Nope").unwrap_err().to_string(),
            "The request must contain the parameter Nope."
        );
    }

    #[test]
    fn integers_and_booleans_name_the_parameter_when_malformed() {
        let p = params(&[("N", "12"), ("Bad", "1x"), ("B", "TRUE"), ("C", "yes")]);
        assert_eq!(p.integer("N"), Ok(Some(12)));
        assert_eq!(p.integer("Absent"), Ok(None));
        assert!(p.integer("Bad").unwrap_err().to_string().contains("Bad"));
        assert_eq!(p.boolean("B"), Ok(Some(true)));
        assert!(p
            .boolean("C")
            .unwrap_err()
            .to_string()
            .contains("parameter C"));
    }

    #[test]
    fn lists_accept_member_and_flattened_forms_in_index_order() {
        let p = params(&[
            ("AttributeName.member.2", "b"),
            ("AttributeName.member.10", "j"),
            ("AttributeName.member.1", "a"),
        ]);
        // 10 sorts before 2 as text; the list must come back in numeric order, and here it
        // has a gap (3..9).
        assert!(p.list("AttributeName").is_err());
        let p = params(&[("AttributeName.2", "b"), ("AttributeName.1", "a")]);
        assert_eq!(p.list("AttributeName"), Ok(vec!["a", "b"]));
        let p = params(&[("AttributeName.member.1", "All")]);
        assert_eq!(p.list("AttributeName"), Ok(vec!["All"]));
        assert_eq!(p.list("Other"), Ok(vec![]));
        assert!(p.has_list("AttributeName"));
        assert!(!p.has_list("Attribute"));
    }

    #[test]
    fn lists_with_gaps_or_malformed_indices_are_refused_naming_the_key() {
        for (key, fragment) in [
            ("L.member.2", "L.member.1"),
            ("L.0", "\"0\""),
            ("L.01", "\"01\""),
            ("L.x", "L.x"),
            ("L.member.-1", "L.member.-1"),
        ] {
            let p = params(&[(key, "v")]);
            let error = p.list("L").unwrap_err().to_string();
            assert!(error.contains(fragment), "{key}: {error}");
        }
        let p = params(&[("L.member.1", "a"), ("L.2", "b")]);
        assert!(p.list("L").is_err(), "mixed infixes");
    }

    #[test]
    fn structure_lists_group_fields_by_index() {
        let p = params(&[
            ("MessageAttribute.1.Name", "color"),
            ("MessageAttribute.1.Value.DataType", "String"),
            ("MessageAttribute.1.Value.StringValue", "red"),
            ("MessageAttribute.2.Name", "blob"),
            ("MessageAttribute.2.Value.DataType", "Binary"),
            ("MessageAttribute.2.Value.BinaryValue", "AAE="),
        ]);
        let entries = p.structs("MessageAttribute").unwrap();
        assert_eq!(entries.len(), 2);
        assert_eq!(entries[0].get("Name"), Some("color"));
        assert_eq!(entries[0].get("Value.StringValue"), Some("red"));
        assert_eq!(entries[1].get("Value.BinaryValue"), Some("AAE="));
        assert_eq!(entries[1].get("Value.StringValue"), None);
        assert_eq!(
            entries[1].required("Value.StringValue"),
            Err(QueryError::Missing(
                "MessageAttribute.2.Value.StringValue".into()
            ))
        );
        let batch = params(&[
            ("Entries.member.1.Id", "a"),
            ("Entries.member.1.MessageBody", "x"),
            ("Entries.member.2.Id", "b"),
        ]);
        let entries = batch.structs("Entries").unwrap();
        assert_eq!(entries[1].get("Id"), Some("b"));
        assert_eq!(entries[1].name(), "Entries.2");
        let scalar = params(&[("Entries.member.1", "x")]);
        assert!(scalar.structs("Entries").is_err());
    }

    #[test]
    fn maps_read_attributes_tags_and_sns_entries() {
        let p = params(&[
            ("Attribute.1.Name", "DelaySeconds"),
            ("Attribute.1.Value", "5"),
            ("Attribute.2.Name", "Policy"),
            ("Tag.1.Key", "env"),
            ("Tag.1.Value", "prod"),
            ("Attributes.entry.1.key", "DisplayName"),
            ("Attributes.entry.1.value", "<&>"),
        ]);
        assert_eq!(
            p.map("Attribute", "Name", "Value"),
            Ok(vec![
                ("DelaySeconds".into(), "5".into()),
                ("Policy".into(), String::new())
            ])
        );
        assert_eq!(
            p.map("Tag", "Key", "Value"),
            Ok(vec![("env".into(), "prod".into())])
        );
        assert_eq!(
            p.map("Attributes", "key", "value"),
            Ok(vec![("DisplayName".into(), "<&>".into())])
        );
        let nameless = params(&[("Attribute.1.Value", "5")]);
        assert_eq!(
            nameless.map("Attribute", "Name", "Value"),
            Err(QueryError::Missing("Attribute.1.Name".into()))
        );
        let twice = params(&[
            ("Tag.1.Key", "a"),
            ("Tag.1.Value", "1"),
            ("Tag.2.Key", "a"),
            ("Tag.2.Value", "2"),
        ]);
        assert!(twice
            .map("Tag", "Key", "Value")
            .unwrap_err()
            .to_string()
            .contains("Tag.2.Key"));
    }

    #[test]
    fn answers_escape_text_and_omit_an_empty_result() {
        let mut answer = XmlAnswer::new("sqs", "ReceiveMessage");
        answer
            .open("Message")
            .element("Body", "<a href=\"x\">&'</a>\r\n")
            .open("Attribute")
            .element("Name", "SenderId");
        let document = answer.document();
        assert!(document.starts_with("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<ReceiveMessageResponse xmlns=\"http://queue.amazonaws.com/doc/2012-11-05/\"><ReceiveMessageResult><Message><Body>&lt;a href=&quot;x&quot;&gt;&amp;&apos;&lt;/a&gt;&#xD;\n</Body><Attribute><Name>SenderId</Name></Attribute></Message></ReceiveMessageResult><ResponseMetadata><RequestId>"), "{document}");
        assert!(document.ends_with("</RequestId></ResponseMetadata></ReceiveMessageResponse>"));

        let kept = XmlAnswer::new("sqs", "ListQueues").with_result().document();
        assert!(kept.contains("<ListQueuesResult></ListQueuesResult><ResponseMetadata>"));
        let empty = XmlAnswer::new("sns", "DeleteTopic").document();
        assert!(empty.contains(
            "<DeleteTopicResponse xmlns=\"http://sns.amazonaws.com/doc/2010-03-31/\"><ResponseMetadata>"
        ), "{empty}");
        assert!(!empty.contains("DeleteTopicResult"));
    }
}
