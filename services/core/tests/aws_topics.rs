//! What the AWS endpoint needs of the topic services, on the embedded engine: attributes
//! stored as written and kept by REST's changes, `CreateTopic`'s create-only write, changes
//! attribute by attribute, and the listing of every subscription of a tenant page by page.

use sluice_embedded::{EmbeddedEngine, EmbeddedOptions};
use sluice_engine::{SystemClock, TenantId};
use sluice_services::{
    Limits, ServiceError, Services, SubscribeRequest, SubscriptionPatch, TopicChange,
    TopicConfigInput,
};
use std::collections::BTreeMap;
use std::sync::Arc;

fn services() -> (Services, TenantId, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let engine = Arc::new(EmbeddedEngine::open(dir.path(), EmbeddedOptions::default()).unwrap());
    let services = Services::new(engine, Arc::new(SystemClock), Limits::default());
    (services, TenantId::parse("acme").unwrap(), dir)
}

fn map(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

#[tokio::test]
async fn topic_attributes_are_kept_as_written_across_rest_and_aws_writes() {
    let (services, tenant, _dir) = services();
    services.ensure_tenant(&tenant, None).await.unwrap();
    let written = map(&[
        ("Policy", "{ \"Version\": \"2012-10-17\" }"),
        ("DisplayName", "N"),
    ]);
    let (view, created) = services
        .create_topic(
            &tenant,
            "news",
            TopicConfigInput::default(),
            written.clone(),
        )
        .await
        .unwrap();
    assert!(created);
    assert_eq!(view.aws_attributes, written);

    // Create-only: an existing topic is answered unchanged.
    let (again, created) = services
        .create_topic(
            &tenant,
            "news",
            TopicConfigInput::default(),
            map(&[("DisplayName", "X")]),
        )
        .await
        .unwrap();
    assert!(!created);
    assert_eq!(again.aws_attributes, written);

    // REST's PUT replaces the configuration, not what the AWS endpoint stored.
    let input = TopicConfigInput {
        tags: Some(map(&[("team", "a")])),
        ..Default::default()
    };
    let (replaced, _) = services.put_topic(&tenant, "news", input).await.unwrap();
    assert_eq!(replaced.aws_attributes, written);

    let change = TopicChange {
        aws_attributes: [
            ("DisplayName".to_string(), None),
            ("KmsMasterKeyId".to_string(), Some("alias/k".to_string())),
        ]
        .into(),
        add_tags: map(&[("env", "prod")]),
        remove_tags: vec!["team".into()],
        ..Default::default()
    };
    let changed = services
        .change_topic(&tenant, "news", change)
        .await
        .unwrap();
    assert_eq!(
        changed.aws_attributes,
        map(&[
            ("KmsMasterKeyId", "alias/k"),
            ("Policy", "{ \"Version\": \"2012-10-17\" }")
        ])
    );
    assert_eq!(changed.config.tags, map(&[("env", "prod")]));

    let standard = TopicChange {
        content_based_deduplication: Some(true),
        ..Default::default()
    };
    assert!(matches!(
        services.change_topic(&tenant, "news", standard).await,
        Err(ServiceError::Validation { field, .. }) if field == "content_based_deduplication"
    ));
    let too_many = TopicChange {
        add_tags: (0..51)
            .map(|n| (format!("k{n}"), "v".to_string()))
            .collect(),
        ..Default::default()
    };
    assert!(services
        .change_topic(&tenant, "news", too_many)
        .await
        .is_err());
    assert_eq!(
        services
            .get_topic(&tenant, "news")
            .await
            .unwrap()
            .config
            .tags,
        map(&[("env", "prod")]),
        "a refused change changes nothing"
    );
    assert!(matches!(
        services
            .change_topic(&tenant, "gone", TopicChange::default())
            .await,
        Err(ServiceError::TopicNotFound)
    ));
}

#[tokio::test]
async fn subscription_attributes_are_settings_of_a_repeated_subscribe_and_merge_on_patch() {
    let (services, tenant, _dir) = services();
    services.ensure_tenant(&tenant, None).await.unwrap();
    services
        .put_topic(&tenant, "news", TopicConfigInput::default())
        .await
        .unwrap();
    services
        .put_queue(&tenant, "q", Default::default())
        .await
        .unwrap();
    let request = |attributes: BTreeMap<String, String>| SubscribeRequest {
        queue: "q".into(),
        aws_attributes: attributes,
        ..Default::default()
    };
    let (first, created) = services
        .subscribe(&tenant, "news", request(map(&[("DeliveryPolicy", "{}")])))
        .await
        .unwrap();
    assert!(created);
    let (same, created) = services
        .subscribe(&tenant, "news", request(map(&[("DeliveryPolicy", "{}")])))
        .await
        .unwrap();
    assert!(!created);
    assert_eq!(same.id, first.id);
    assert!(matches!(
        services
            .subscribe(&tenant, "news", request(map(&[("DeliveryPolicy", "{ }")])))
            .await,
        Err(ServiceError::Conflict(_))
    ));

    let patch = SubscriptionPatch {
        raw_delivery: Some(true),
        aws_attributes: [
            ("DeliveryPolicy".to_string(), None),
            ("SubscriptionRoleArn".to_string(), Some("arn:r".to_string())),
        ]
        .into(),
        ..Default::default()
    };
    let patched = services
        .patch_subscription(&tenant, &first.id, patch)
        .await
        .unwrap();
    assert!(patched.raw_delivery);
    assert_eq!(
        patched.aws_attributes,
        map(&[("SubscriptionRoleArn", "arn:r")])
    );
    let rest_patch = SubscriptionPatch {
        raw_delivery: Some(false),
        ..Default::default()
    };
    let kept = services
        .patch_subscription(&tenant, &first.id, rest_patch)
        .await
        .unwrap();
    assert_eq!(
        kept.aws_attributes,
        map(&[("SubscriptionRoleArn", "arn:r")])
    );
}

#[tokio::test]
async fn every_subscription_of_a_tenant_is_listed_once_across_pages() {
    let (services, tenant, _dir) = services();
    services.ensure_tenant(&tenant, None).await.unwrap();
    let mut expected = Vec::new();
    for topic in ["a", "b", "c", "d"] {
        services
            .put_topic(&tenant, topic, TopicConfigInput::default())
            .await
            .unwrap();
    }
    for queue in ["q1", "q2", "q3"] {
        services
            .put_queue(&tenant, queue, Default::default())
            .await
            .unwrap();
    }
    // a: 3 subscriptions, b: none, c: 1, d: 2.
    for (topic, queues) in [("a", 3), ("c", 1), ("d", 2)] {
        for queue in ["q1", "q2", "q3"].into_iter().take(queues) {
            let request = SubscribeRequest {
                queue: queue.into(),
                ..Default::default()
            };
            let (view, _) = services.subscribe(&tenant, topic, request).await.unwrap();
            expected.push((topic.to_string(), view.id));
        }
    }
    expected.sort();
    for limit in [1, 2, 4, 100] {
        let mut listed = Vec::new();
        let mut token = None;
        loop {
            let page = services
                .list_tenant_subscriptions(&tenant, Some(limit), token.as_deref())
                .await
                .unwrap();
            assert!(page.subscriptions.len() <= limit as usize);
            listed.extend(
                page.subscriptions
                    .into_iter()
                    .map(|s| (s.topic.as_str().to_string(), s.id)),
            );
            match page.next_token {
                Some(next) => token = Some(next),
                None => break,
            }
        }
        assert_eq!(listed, expected, "limit {limit}");
    }
    assert!(matches!(
        services
            .list_tenant_subscriptions(&tenant, None, Some("garbage"))
            .await,
        Err(ServiceError::Validation { field, .. }) if field == "next_token"
    ));
}
