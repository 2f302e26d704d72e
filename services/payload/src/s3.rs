//! [`S3Store`]: payload objects in a bucket of any S3-compatible store, under an optional
//! prefix. Credentials come from the standard AWS chain (environment variables, profile files,
//! ...). Bodies larger than one part are uploaded in parts that are slices of the one buffer the
//! body already is, so a big body is never copied to be sent.

use crate::{Millis, ObjectPage, PayloadError, PayloadKey, PayloadStore, StoredObject};
use async_trait::async_trait;
use aws_sdk_s3::config::retry::RetryConfig;
use aws_sdk_s3::config::timeout::TimeoutConfig;
use aws_sdk_s3::config::{BehaviorVersion, Region};
use aws_sdk_s3::error::{DisplayErrorContext, SdkError};
use aws_sdk_s3::primitives::ByteStream;
use aws_sdk_s3::types::{CompletedMultipartUpload, CompletedPart};
use aws_sdk_s3::Client;
use aws_smithy_http_client::tls;

/// The most a read reserves up front from the object's announced length (Sluice writes
/// objects up to 64 MiB; a larger announcement, from a store that is not ours, grows as it
/// arrives instead).
const MAX_PREALLOCATED: i64 = 64 << 20;
use bytes::Bytes;
use std::time::Duration;

/// Bodies up to this size go in one request; larger ones in parts of this size (S3's parts must
/// be at least 5 MiB, except the last).
pub(crate) const PART_BYTES: usize = 8 * 1024 * 1024;

/// Where and how to reach the bucket.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct S3Settings {
    /// The bucket (it must exist).
    pub bucket: String,
    /// Prepended to every key (`""` or ending in `/`).
    pub prefix: String,
    /// The store's URL when it is not AWS's (`http://127.0.0.1:9000`).
    pub endpoint: Option<String>,
    /// The region to sign for.
    pub region: String,
    /// Address the bucket in the path (`endpoint/bucket/key`) rather than in the host name,
    /// as most self-hosted S3-compatible servers need.
    pub force_path_style: bool,
}

impl S3Settings {
    /// Reads `s3://bucket[/prefix]`.
    pub fn from_url(url: &str, region: &str) -> Result<Self, String> {
        let rest = url
            .strip_prefix("s3://")
            .ok_or_else(|| format!("{url:?} does not start with s3://"))?;
        let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
        let valid_bucket = (3..=63).contains(&bucket.len())
            && bucket
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'.');
        if !valid_bucket {
            return Err(format!(
                "{bucket:?} is not a bucket name (3-63 of lowercase letters, digits, '-' and '.')"
            ));
        }
        let prefix = prefix.trim_matches('/');
        Ok(Self {
            bucket: bucket.to_owned(),
            prefix: if prefix.is_empty() {
                String::new()
            } else {
                format!("{prefix}/")
            },
            endpoint: None,
            region: region.to_owned(),
            force_path_style: false,
        })
    }
}

/// Payload objects in an S3 bucket.
#[derive(Debug, Clone)]
pub struct S3Store {
    client: Client,
    settings: S3Settings,
}

impl S3Store {
    /// A client for the bucket. Nothing is sent yet: [`PayloadStore::ping`] checks the bucket.
    pub async fn connect(settings: S3Settings) -> Self {
        let https = aws_smithy_http_client::Builder::new()
            .tls_provider(tls::Provider::Rustls(
                tls::rustls_provider::CryptoMode::Ring,
            ))
            .build_https();
        let mut loader = aws_config::defaults(BehaviorVersion::latest())
            .http_client(https)
            .region(Region::new(settings.region.clone()));
        if let Some(endpoint) = &settings.endpoint {
            loader = loader.endpoint_url(endpoint);
        }
        let shared = loader.load().await;
        // An unreachable store must turn into a 503 within a request's patience, not after the
        // SDK's default retries with backoff; one retry covers a dropped connection.
        let config = aws_sdk_s3::config::Builder::from(&shared)
            .force_path_style(settings.force_path_style)
            .retry_config(RetryConfig::standard().with_max_attempts(2))
            .timeout_config(
                TimeoutConfig::builder()
                    .connect_timeout(Duration::from_secs(3))
                    .operation_attempt_timeout(Duration::from_secs(60))
                    .build(),
            )
            .build();
        Self {
            client: Client::from_conf(config),
            settings,
        }
    }

    /// Creates the bucket if it does not exist (for development setups and tests; production
    /// buckets are made by whoever owns the storage, with their own lifecycle rules).
    pub async fn create_bucket_if_missing(&self) -> Result<(), PayloadError> {
        if self.ping().await.is_ok() {
            return Ok(());
        }
        match self
            .client
            .create_bucket()
            .bucket(&self.settings.bucket)
            .send()
            .await
        {
            Ok(_) => Ok(()),
            Err(SdkError::ServiceError(e))
                if e.err().is_bucket_already_owned_by_you()
                    || e.err().is_bucket_already_exists() =>
            {
                Ok(())
            }
            Err(e) => Err(unavailable("creating the bucket", &self.settings.bucket, e)),
        }
    }

    /// The settings in force.
    pub fn settings(&self) -> &S3Settings {
        &self.settings
    }

    fn object_key(&self, key: &PayloadKey) -> String {
        format!("{}{}", self.settings.prefix, key.as_str())
    }

    async fn put_in_parts(&self, object: &str, body: Bytes) -> Result<(), PayloadError> {
        let bucket = &self.settings.bucket;
        let upload = self
            .client
            .create_multipart_upload()
            .bucket(bucket)
            .key(object)
            .send()
            .await
            .map_err(|e| unavailable("starting the upload of", object, e))?;
        let upload_id = upload
            .upload_id()
            .ok_or_else(|| PayloadError::Invalid(format!("no upload id for {object}")))?
            .to_owned();
        let result = async {
            let mut parts = Vec::new();
            for (index, start) in (0..body.len()).step_by(PART_BYTES).enumerate() {
                let number = index as i32 + 1;
                let part = body.slice(start..body.len().min(start + PART_BYTES));
                let sent = self
                    .client
                    .upload_part()
                    .bucket(bucket)
                    .key(object)
                    .upload_id(&upload_id)
                    .part_number(number)
                    .body(ByteStream::from(part))
                    .send()
                    .await
                    .map_err(|e| unavailable("uploading a part of", object, e))?;
                parts.push(
                    CompletedPart::builder()
                        .part_number(number)
                        .set_e_tag(sent.e_tag().map(str::to_owned))
                        .build(),
                );
            }
            self.client
                .complete_multipart_upload()
                .bucket(bucket)
                .key(object)
                .upload_id(&upload_id)
                .multipart_upload(
                    CompletedMultipartUpload::builder()
                        .set_parts(Some(parts))
                        .build(),
                )
                .send()
                .await
                .map_err(|e| unavailable("completing the upload of", object, e))?;
            Ok(())
        }
        .await;
        if result.is_err() {
            // Parts of an abandoned upload cost storage until aborted; if the abort fails too,
            // the bucket's lifecycle rule for incomplete uploads is the backstop.
            if let Err(e) = self
                .client
                .abort_multipart_upload()
                .bucket(bucket)
                .key(object)
                .upload_id(&upload_id)
                .send()
                .await
            {
                tracing::warn!(object, error = %DisplayErrorContext(&e), "could not abort a failed upload");
            }
        }
        result
    }
}

fn unavailable<E: std::error::Error + Send + Sync + 'static, R: std::fmt::Debug>(
    what: &str,
    object: &str,
    error: SdkError<E, R>,
) -> PayloadError {
    PayloadError::Unavailable(format!("{what} {object}: {}", DisplayErrorContext(&error)))
}

#[async_trait]
impl PayloadStore for S3Store {
    async fn put(&self, key: &PayloadKey, body: Bytes) -> Result<(), PayloadError> {
        let object = self.object_key(key);
        if body.len() > PART_BYTES {
            return self.put_in_parts(&object, body).await;
        }
        self.client
            .put_object()
            .bucket(&self.settings.bucket)
            .key(&object)
            .body(ByteStream::from(body))
            .send()
            .await
            .map_err(|e| unavailable("writing", &object, e))?;
        Ok(())
    }

    async fn get(&self, key: &PayloadKey) -> Result<Vec<u8>, PayloadError> {
        let object = self.object_key(key);
        let answer = match self
            .client
            .get_object()
            .bucket(&self.settings.bucket)
            .key(&object)
            .send()
            .await
        {
            Ok(answer) => answer,
            Err(SdkError::ServiceError(e)) if e.err().is_no_such_key() => {
                return Err(PayloadError::NotFound(key.to_string()))
            }
            Err(e) => return Err(unavailable("reading", &object, e)),
        };
        // Each chunk is copied once, into a buffer of the object's size, and released as it
        // is: the whole body is never held twice.
        let expected = answer
            .content_length()
            .unwrap_or(0)
            .clamp(0, MAX_PREALLOCATED) as usize;
        let mut body = Vec::with_capacity(expected);
        let mut chunks = answer.body;
        while let Some(chunk) = chunks.try_next().await.map_err(|e| {
            PayloadError::Unavailable(format!("reading {object}: the body broke off: {e}"))
        })? {
            body.extend_from_slice(&chunk);
        }
        Ok(body)
    }

    async fn delete(&self, key: &PayloadKey) -> Result<(), PayloadError> {
        let object = self.object_key(key);
        // S3 answers a delete of a missing key with success, as this trait asks.
        self.client
            .delete_object()
            .bucket(&self.settings.bucket)
            .key(&object)
            .send()
            .await
            .map_err(|e| unavailable("deleting", &object, e))?;
        Ok(())
    }

    async fn list(&self, after: Option<&str>, limit: usize) -> Result<ObjectPage, PayloadError> {
        let prefix = &self.settings.prefix;
        let answer = self
            .client
            .list_objects_v2()
            .bucket(&self.settings.bucket)
            .prefix(prefix.as_str())
            .set_start_after(after.map(|after| format!("{prefix}{after}")))
            .max_keys(limit.clamp(1, 1000) as i32)
            .send()
            .await
            .map_err(|e| unavailable("listing", prefix, e))?;
        let mut page = ObjectPage::default();
        let mut last = None;
        for object in answer.contents() {
            let Some(name) = object.key() else { continue };
            last = Some(
                name.strip_prefix(prefix.as_str())
                    .unwrap_or(name)
                    .to_owned(),
            );
            let Ok(key) = PayloadKey::parse(name.strip_prefix(prefix.as_str()).unwrap_or(name))
            else {
                continue;
            };
            let written_at = object
                .last_modified()
                .and_then(|t| t.to_millis().ok())
                .map_or(0, |ms| ms.max(0) as Millis);
            page.objects.push(StoredObject {
                key,
                size: object.size().unwrap_or(0).max(0) as u64,
                written_at,
            });
        }
        if answer.is_truncated() == Some(true) {
            page.next = last;
        }
        Ok(page)
    }

    async fn ping(&self) -> Result<(), PayloadError> {
        self.client
            .head_bucket()
            .bucket(&self.settings.bucket)
            .send()
            .await
            .map_err(|e| unavailable("reaching the bucket", &self.settings.bucket, e))?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_give_bucket_and_prefix() {
        let s = S3Settings::from_url("s3://sluice-payloads", "eu-west-1").unwrap();
        assert_eq!(
            (s.bucket.as_str(), s.prefix.as_str()),
            ("sluice-payloads", "")
        );
        assert_eq!(s.region, "eu-west-1");
        let s = S3Settings::from_url("s3://bucket.one/a/b/", "us-east-1").unwrap();
        assert_eq!(
            (s.bucket.as_str(), s.prefix.as_str()),
            ("bucket.one", "a/b/")
        );
        for bad in [
            "bucket",
            "s3://",
            "s3://Bucket",
            "s3://ab",
            "http://bucket/x",
        ] {
            assert!(S3Settings::from_url(bad, "us-east-1").is_err(), "{bad}");
        }
    }
}
