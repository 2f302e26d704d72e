//! Queue catalog cases ([`Queues`](sluice_engine::Queues)): configuration, listing, stats, quotas, deletion, isolation and refused input.

use super::*;

/// Deleting a queue removes it and its messages; a queue re-created under the same name starts
/// empty, refuses the old queue's handles and has its own configuration at once (nothing
/// cached by name outlives the old queue).
pub async fn delete_queue_removes_messages_and_handles(ctx: Ctx) {
    ctx.queue("q", QueueConfigPatch::default()).await;
    let first_created = ctx
        .services
        .get_queue(&ctx.tenant, "q")
        .await
        .unwrap()
        .created_at;
    ctx.send("q", "m").await;
    ctx.send("q", "n").await;
    let old = handle(&ctx.receive("q", 1, 30).await[0]);
    ctx.services.delete_queue(&ctx.tenant, "q").await.unwrap();
    assert_eq!(
        ctx.services.get_queue(&ctx.tenant, "q").await,
        Err(ServiceError::QueueNotFound)
    );
    assert_eq!(
        ctx.services.send(&ctx.tenant, "q", text("x")).await,
        Err(ServiceError::QueueNotFound)
    );
    assert_eq!(
        ctx.services.delete_queue(&ctx.tenant, "q").await,
        Err(ServiceError::QueueNotFound)
    );
    ctx.clock.advance(SECOND);
    ctx.queue(
        "q",
        QueueConfigPatch {
            delay_seconds: Some(60),
            ..QueueConfigPatch::default()
        },
    )
    .await;
    assert_eq!(ctx.stats("q").await, (0, 0, 0));
    assert!(ctx.receive("q", 10, 30).await.is_empty());
    assert_eq!(
        ctx.services.delete_message(&ctx.tenant, "q", &old).await,
        Err(ServiceError::ReceiptHandleInvalid)
    );
    let again = ctx.services.get_queue(&ctx.tenant, "q").await.unwrap();
    assert_eq!(again.config.delay_seconds, 60);
    assert!(again.created_at > first_created);
    // The new queue's delay applies to the very next send.
    ctx.send("q", "later").await;
    assert_eq!(ctx.stats("q").await, (0, 0, 1));
}

/// Stats count each state and the oldest message's age.
pub async fn stats_count_each_state(ctx: Ctx) {
    ctx.queue("q", QueueConfigPatch::default()).await;
    let view = ctx.services.get_queue(&ctx.tenant, "q").await.unwrap();
    assert_eq!(view.oldest_age_seconds, None);
    for i in 0..4 {
        ctx.send("q", &format!("v{i}")).await;
    }
    ctx.clock.advance(10 * SECOND);
    ctx.services
        .send(
            &ctx.tenant,
            "q",
            SendRequest {
                delay_seconds: Some(30),
                ..text("d")
            },
        )
        .await
        .unwrap();
    ctx.receive("q", 3, 30).await;
    let view = ctx.services.get_queue(&ctx.tenant, "q").await.unwrap();
    assert_eq!(
        (view.stats.visible, view.stats.in_flight, view.stats.delayed),
        (1, 3, 1)
    );
    assert_eq!(view.oldest_age_seconds, Some(10));
    let listed = ctx
        .services
        .list_queues(&ctx.tenant, "", None, None)
        .await
        .unwrap();
    assert_eq!(listed.queues[0].stats, view.stats);
}

/// `PUT` on an existing queue replaces the whole configuration (omitted fields reset) and
/// keeps `created_at` and the messages.
pub async fn put_replaces_config_and_keeps_messages(ctx: Ctx) {
    let (first, created) = ctx
        .services
        .put_queue(
            &ctx.tenant,
            "q",
            QueueConfigPatch {
                visibility_timeout_seconds: Some(99),
                delay_seconds: Some(7),
                ..QueueConfigPatch::default()
            },
        )
        .await
        .unwrap();
    assert!(created);
    assert_eq!(first.config.visibility_timeout_seconds, 99);
    ctx.services
        .send(
            &ctx.tenant,
            "q",
            SendRequest {
                delay_seconds: Some(0),
                ..text("kept")
            },
        )
        .await
        .unwrap();
    ctx.clock.advance(SECOND);
    let (second, created) = ctx
        .services
        .put_queue(
            &ctx.tenant,
            "q",
            QueueConfigPatch {
                receive_wait_seconds: Some(3),
                ..QueueConfigPatch::default()
            },
        )
        .await
        .unwrap();
    assert!(!created);
    assert_eq!(second.created_at, first.created_at);
    assert_eq!(second.updated_at, crate::START + SECOND);
    assert_eq!(
        second.config.visibility_timeout_seconds, 30,
        "reset to its default"
    );
    assert_eq!(second.config.delay_seconds, 0);
    assert_eq!(second.config.receive_wait_seconds, 3);
    assert_eq!(second.stats.visible, 1);
    assert_eq!(bodies(&ctx.receive("q", 10, 30).await), ["kept"]);
}

/// `PATCH` changes only the fields it names.
pub async fn patch_changes_only_given_fields(ctx: Ctx) {
    ctx.queue(
        "q",
        QueueConfigPatch {
            visibility_timeout_seconds: Some(99),
            max_depth: Some(Some(10)),
            ..QueueConfigPatch::default()
        },
    )
    .await;
    let patched = ctx
        .services
        .patch_queue(
            &ctx.tenant,
            "q",
            QueueConfigPatch {
                delay_seconds: Some(4),
                ..QueueConfigPatch::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(patched.config.visibility_timeout_seconds, 99);
    assert_eq!(patched.config.delay_seconds, 4);
    assert_eq!(patched.config.max_depth, Some(10));
    let cleared = ctx
        .services
        .patch_queue(
            &ctx.tenant,
            "q",
            QueueConfigPatch {
                max_depth: Some(None),
                ..QueueConfigPatch::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(cleared.config.max_depth, None);
    assert_eq!(
        ctx.services
            .patch_queue(&ctx.tenant, "missing", QueueConfigPatch::default())
            .await,
        Err(ServiceError::QueueNotFound)
    );
}

/// Listing is ordered by name, filtered by prefix and paged with tokens we issued.
pub async fn list_queues_pages_by_name_with_prefix(ctx: Ctx) {
    for name in ["b-2", "a-1", "b-1", "c", "b-3"] {
        ctx.queue(name, QueueConfigPatch::default()).await;
    }
    let names = |page: &sluice_services::QueuePage| {
        page.queues
            .iter()
            .map(|q| q.name.as_str().to_owned())
            .collect::<Vec<_>>()
    };
    let all = ctx
        .services
        .list_queues(&ctx.tenant, "", None, None)
        .await
        .unwrap();
    assert_eq!(names(&all), ["a-1", "b-1", "b-2", "b-3", "c"]);
    assert_eq!(all.next_token, None);
    let first = ctx
        .services
        .list_queues(&ctx.tenant, "b-", Some(2), None)
        .await
        .unwrap();
    assert_eq!(names(&first), ["b-1", "b-2"]);
    let token = first.next_token.clone().expect("a second page");
    let second = ctx
        .services
        .list_queues(&ctx.tenant, "b-", Some(2), Some(&token))
        .await
        .unwrap();
    assert_eq!(names(&second), ["b-3"]);
    assert_eq!(second.next_token, None);
    for bad in [Some(0), Some(1001)] {
        assert!(ctx
            .services
            .list_queues(&ctx.tenant, "", bad, None)
            .await
            .is_err());
    }
    assert!(matches!(
        ctx.services.list_queues(&ctx.tenant, "", None, Some("not-ours")).await,
        Err(ServiceError::Validation { ref field, .. }) if field == "next_token"
    ));
}

/// Nothing one tenant names reaches another tenant's queue: it answers as absent.
pub async fn tenants_cannot_reach_each_others_queues(ctx: Ctx) {
    ctx.queue("shared-name", QueueConfigPatch::default()).await;
    ctx.send("shared-name", "secret").await;
    let mine = handle(&ctx.receive("shared-name", 1, 0).await[0]);
    let other: &TenantId = &ctx.other_tenant;
    let s = &ctx.services;
    assert_eq!(
        s.get_queue(other, "shared-name").await,
        Err(ServiceError::QueueNotFound)
    );
    assert!(s
        .list_queues(other, "", None, None)
        .await
        .unwrap()
        .queues
        .is_empty());
    assert_eq!(
        s.send(other, "shared-name", text("x")).await,
        Err(ServiceError::QueueNotFound)
    );
    assert_eq!(
        s.receive(other, "shared-name", receive_n(10, 0)).await,
        Err(ServiceError::QueueNotFound)
    );
    assert_eq!(
        s.peek(other, "shared-name", MessageState::Visible, None)
            .await,
        Err(ServiceError::QueueNotFound)
    );
    assert_eq!(
        s.purge_queue(other, "shared-name").await,
        Err(ServiceError::QueueNotFound)
    );
    assert_eq!(
        s.delete_message(other, "shared-name", &mine).await,
        Err(ServiceError::QueueNotFound)
    );
    assert_eq!(
        s.delete_queue(other, "shared-name").await,
        Err(ServiceError::QueueNotFound)
    );

    // The other tenant's own queue of the same name is a different queue.
    let (_, created) = s
        .put_queue(other, "shared-name", QueueConfigPatch::default())
        .await
        .unwrap();
    assert!(created);
    assert_eq!(
        s.delete_message(other, "shared-name", &mine).await,
        Err(ServiceError::ReceiptHandleInvalid)
    );
    assert!(s
        .receive(other, "shared-name", receive_n(10, 0))
        .await
        .unwrap()
        .is_empty());
    assert_eq!(bodies(&ctx.receive("shared-name", 10, 0).await), ["secret"]);
}

/// Refused input names the field and changes nothing.
pub async fn invalid_input_changes_nothing(ctx: Ctx) {
    let s = &ctx.services;
    let t = &ctx.tenant;
    let patch = |f: fn(&mut QueueConfigPatch)| {
        let mut p = QueueConfigPatch::default();
        f(&mut p);
        p
    };
    assert_eq!(
        field_of(
            s.put_queue(t, "bad name", QueueConfigPatch::default())
                .await
        ),
        "queue"
    );
    assert_eq!(
        field_of(
            s.put_queue(
                t,
                "q.fifo",
                QueueConfigPatch {
                    deduplication_scope: Some("tenant".into()),
                    ..QueueConfigPatch::default()
                }
            )
            .await
        ),
        "deduplication_scope"
    );
    for (p, field) in [
        (
            patch(|p| p.visibility_timeout_seconds = Some(43_201)),
            "visibility_timeout_seconds",
        ),
        (
            patch(|p| p.message_retention_seconds = Some(59)),
            "message_retention_seconds",
        ),
        (patch(|p| p.delay_seconds = Some(901)), "delay_seconds"),
        (
            patch(|p| p.receive_wait_seconds = Some(21)),
            "receive_wait_seconds",
        ),
        (
            patch(|p| p.max_message_bytes = Some(1023)),
            "max_message_bytes",
        ),
        (
            patch(|p| p.max_message_bytes = Some(1_048_577)),
            "max_message_bytes",
        ),
        (
            patch(|p| p.content_based_deduplication = Some(true)),
            "content_based_deduplication",
        ),
        (
            patch(|p| {
                p.redrive_policy = Some(Some(sluice_services::RedrivePolicyInput {
                    dead_letter_queue: "missing".into(),
                    max_receive_count: 3,
                }))
            }),
            "redrive_policy.dead_letter_queue",
        ),
    ] {
        assert_eq!(field_of(s.put_queue(t, "q", p).await), field);
    }
    assert_eq!(
        s.get_queue(t, "q").await,
        Err(ServiceError::QueueNotFound),
        "nothing was created"
    );

    ctx.queue("q", QueueConfigPatch::default()).await;
    assert_eq!(
        field_of(
            s.patch_queue(t, "q", patch(|p| p.delay_seconds = Some(1000)))
                .await
        ),
        "delay_seconds"
    );
    assert_eq!(s.get_queue(t, "q").await.unwrap().config.delay_seconds, 0);
    assert_eq!(
        field_of(
            s.send(
                t,
                "q",
                SendRequest {
                    deduplication_id: Some("d".into()),
                    ..text("m")
                }
            )
            .await
        ),
        "deduplication_id"
    );
    assert_eq!(field_of(s.send(t, "q", text("")).await), "body");
    for (request, field) in [
        (receive_n(0, 30), "max_messages"),
        (receive_n(11, 30), "max_messages"),
        (receive_n(1, 43_201), "visibility_timeout_seconds"),
        (
            ReceiveRequest {
                wait_seconds: Some(21),
                ..ReceiveRequest::default()
            },
            "wait_seconds",
        ),
    ] {
        assert_eq!(field_of(s.receive(t, "q", request).await), field);
    }
    assert_eq!(ctx.stats("q").await, (0, 0, 0));
}

/// `max_queues` holds under concurrency: of 50 simultaneous creations against a quota of 2,
/// exactly 2 succeed and the others are `QuotaExceeded`, changing nothing.
pub async fn max_queues_holds_under_concurrent_creation(ctx: Ctx) {
    let id = ctx.tenant.as_str().to_owned();
    let quotas = Quotas {
        max_queues: Some(2),
        ..Quotas::default()
    };
    ctx.services.create_tenant(&id, quotas).await.unwrap();
    let mut tasks = tokio::task::JoinSet::new();
    for n in 0..50 {
        let (services, tenant) = (ctx.services.clone(), ctx.tenant.clone());
        tasks.spawn(async move {
            services
                .put_queue(&tenant, &format!("q-{n:02}"), QueueConfigPatch::default())
                .await
        });
    }
    let (mut created, mut refused) = (0, 0);
    while let Some(answer) = tasks.join_next().await {
        match answer.unwrap() {
            Ok((_, true)) => created += 1,
            Err(ServiceError::QuotaExceeded(_)) => refused += 1,
            other => panic!("expected created or QuotaExceeded, got {other:?}"),
        }
    }
    assert_eq!((created, refused), (2, 48));
    let listed = ctx
        .services
        .list_queues(&ctx.tenant, "", None, None)
        .await
        .unwrap();
    assert_eq!(listed.queues.len(), 2);
    assert_eq!(ctx.engine.count_queues(&ctx.tenant).await.unwrap(), 2);
    // Replacing one of them is no creation, so it is not refused.
    let name = listed.queues[0].name.as_str().to_owned();
    let (_, again) = ctx
        .services
        .put_queue(&ctx.tenant, &name, QueueConfigPatch::default())
        .await
        .unwrap();
    assert!(!again);
}
