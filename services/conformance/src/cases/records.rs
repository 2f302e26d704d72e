//! Cases of the services' small records (compare-and-set) and of the seq listing that redrive
//! tasks walk a queue with.

use super::*;

/// Versions start at 1 and grow by one; a write or delete naming another version changes
/// nothing; listings are ordered by key, filtered by prefix, paged by `after`.
pub async fn records_are_compare_and_set(ctx: Ctx) {
    let e = &ctx.engine;
    // Keys of their own, since every case shares the store.
    let p = format!("{}/", ctx.tenant);
    let key = |k: &str| format!("{p}{k}");
    assert_eq!(e.get_record("test", &key("a")).await.unwrap(), None);
    assert_eq!(
        e.put_record("test", &key("a"), "one".into(), None)
            .await
            .unwrap(),
        Some(1)
    );
    assert_eq!(
        e.put_record("test", &key("a"), "again".into(), None)
            .await
            .unwrap(),
        None,
        "a create meets the existing record"
    );
    assert_eq!(
        e.put_record("test", &key("a"), "two".into(), Some(1))
            .await
            .unwrap(),
        Some(2)
    );
    assert_eq!(
        e.put_record("test", &key("a"), "stale".into(), Some(1))
            .await
            .unwrap(),
        None,
        "a write from an old version loses"
    );
    let stored = e.get_record("test", &key("a")).await.unwrap().unwrap();
    assert_eq!((stored.version, stored.value.as_str()), (2, "two"));
    assert_eq!(
        e.get_record("other-kind", &key("a")).await.unwrap(),
        None,
        "kinds are separate"
    );

    for k in ["c", "b", "d"] {
        e.put_record("test", &key(k), format!("value {k}"), None)
            .await
            .unwrap();
    }
    e.put_record("test", &format!("{}/x", ctx.other_tenant), "x".into(), None)
        .await
        .unwrap();
    let listed = |records: Vec<(String, sluice_engine::Record)>| -> Vec<String> {
        records.into_iter().map(|(k, _)| k).collect()
    };
    assert_eq!(
        listed(e.list_records("test", &p, None, 10).await.unwrap()),
        [key("a"), key("b"), key("c"), key("d")]
    );
    assert_eq!(
        listed(
            e.list_records("test", &p, Some(&key("b")), 2)
                .await
                .unwrap()
        ),
        [key("c"), key("d")]
    );
    assert!(e
        .list_records("test", &p, Some(&key("d")), 10)
        .await
        .unwrap()
        .is_empty());

    assert!(!e.delete_record("test", &key("a"), 1).await.unwrap());
    assert!(e.delete_record("test", &key("a"), 2).await.unwrap());
    assert_eq!(e.get_record("test", &key("a")).await.unwrap(), None);
    assert_eq!(
        e.put_record("test", &key("a"), "fresh".into(), None)
            .await
            .unwrap(),
        Some(1),
        "a deleted record can be created again"
    );
}

/// `message_seqs` lists stored messages' seqs in order, whatever their state, skipping those
/// gone, and reports the last seq handed out.
pub async fn message_seqs_walk_a_queue_in_order(ctx: Ctx) {
    ctx.queue("q", QueueConfigPatch::default()).await;
    let key = QueueKey::new(ctx.tenant.clone(), QueueName::parse("q").unwrap());
    for i in 0..6 {
        ctx.send("q", &format!("m{i}")).await;
    }
    let all = ctx
        .engine
        .peek(&key, MessageState::Visible, 100, ctx.clock.now())
        .await
        .unwrap();
    let mut seqs: Vec<u64> = all.iter().map(|m| m.seq).collect();
    seqs.sort();
    // One in flight, one deleted.
    let received = ctx.receive("q", 2, 30).await;
    ctx.services
        .delete_message(&ctx.tenant, "q", &handle(&received[1]))
        .await
        .unwrap();
    let deleted_seq = all
        .iter()
        .find(|m| m.message_id == received[1].message_id)
        .unwrap()
        .seq;
    let remaining: Vec<u64> = seqs.iter().copied().filter(|&s| s != deleted_seq).collect();

    let scan = ctx.engine.message_seqs(&key, 0, 100).await.unwrap();
    assert_eq!(scan.seqs, remaining);
    assert_eq!(scan.last_seq, *seqs.last().unwrap());
    assert!(scan.scanned_to >= scan.last_seq);

    // Page by page, two at a time, from where each page says it got to.
    let mut walked: Vec<u64> = Vec::new();
    let mut after = 0;
    for _ in 0..20 {
        let page = ctx.engine.message_seqs(&key, after, 2).await.unwrap();
        assert!(page.seqs.len() <= 2);
        assert!(page.seqs.iter().all(|&s| s > after));
        walked.extend(&page.seqs);
        after = page.scanned_to;
        if after >= page.last_seq {
            break;
        }
    }
    assert_eq!(walked, remaining);
    assert!(ctx
        .engine
        .message_seqs(&key, scan.last_seq, 10)
        .await
        .unwrap()
        .seqs
        .is_empty());
    let missing = QueueKey::new(ctx.tenant.clone(), QueueName::parse("nope").unwrap());
    assert!(matches!(
        ctx.engine.message_seqs(&missing, 0, 10).await,
        Err(sluice_engine::EngineError::QueueNotFound)
    ));
}
