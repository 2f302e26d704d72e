//! The rules of `PayloadStore`, checked on each store: a local folder, and S3 against a real
//! S3-compatible server (moto's) started on a free port.

use bytes::Bytes;
use sluice_payload::{LocalStore, PayloadError, PayloadKey, PayloadStore, S3Settings, S3Store};
use sluice_testkit::S3Server;
use std::sync::Once;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
}

/// Bytes that differ at every offset, so a misplaced part shows.
fn body(len: usize, seed: u8) -> Bytes {
    (0..len)
        .map(|i| {
            (i as u8)
                .wrapping_mul(31)
                .wrapping_add(seed ^ (i >> 13) as u8)
        })
        .collect::<Vec<u8>>()
        .into()
}

async fn s3_store(server: &S3Server, bucket: &str, prefix: &str) -> S3Store {
    // moto accepts any credentials; the store reads them from the standard chain. Every test
    // sets the same values, before any store of this process is made.
    static CREDENTIALS: Once = Once::new();
    CREDENTIALS.call_once(|| {
        std::env::set_var("AWS_ACCESS_KEY_ID", "testing");
        std::env::set_var("AWS_SECRET_ACCESS_KEY", "testing");
        std::env::remove_var("AWS_PROFILE");
    });
    let mut settings =
        S3Settings::from_url(&format!("s3://{bucket}/{prefix}"), "us-east-1").unwrap();
    settings.endpoint = Some(server.endpoint());
    settings.force_path_style = true;
    let store = S3Store::connect(settings).await;
    store.create_bucket_if_missing().await.unwrap();
    store
}

async fn bodies_read_back_whole_and_overwrites_win(store: &dyn PayloadStore) {
    let small = PayloadKey::generate("acme").unwrap();
    store.put(&small, body(1_000, 1)).await.unwrap();
    assert_eq!(store.get(&small).await.unwrap(), body(1_000, 1));

    // More than two parts of an upload, the last one short.
    let big = PayloadKey::generate("acme").unwrap();
    let big_body = body(20 * 1024 * 1024 + 12_345, 2);
    store.put(&big, big_body.clone()).await.unwrap();
    assert!(
        store.get(&big).await.unwrap() == big_body,
        "big body differs"
    );

    store.put(&small, body(10, 3)).await.unwrap();
    assert_eq!(store.get(&small).await.unwrap(), body(10, 3));

    let empty = PayloadKey::generate("acme").unwrap();
    store.put(&empty, Bytes::new()).await.unwrap();
    assert_eq!(store.get(&empty).await.unwrap(), Bytes::new());
}

async fn missing_objects_are_not_found_and_deletes_are_idempotent(store: &dyn PayloadStore) {
    let key = PayloadKey::generate("acme").unwrap();
    assert!(matches!(
        store.get(&key).await,
        Err(PayloadError::NotFound(k)) if k == key.as_str()
    ));
    store.delete(&key).await.unwrap();
    store.put(&key, body(100, 4)).await.unwrap();
    store.delete(&key).await.unwrap();
    assert!(matches!(
        store.get(&key).await,
        Err(PayloadError::NotFound(_))
    ));
    store.delete(&key).await.unwrap();
}

async fn listings_page_through_every_object_once_in_key_order(store: &dyn PayloadStore) {
    let before = now_ms();
    let mut written = Vec::new();
    for (i, tenant) in ["acme", "acme", "zeta-2", "acme", "beta_1", "zeta-2", "acme"]
        .into_iter()
        .enumerate()
    {
        let key = PayloadKey::generate(tenant).unwrap();
        store.put(&key, body(100 + i, 5)).await.unwrap();
        written.push((key, 100 + i as u64));
    }
    let after = now_ms();
    written.sort();

    let mut listed = Vec::new();
    let mut token: Option<String> = None;
    let mut pages = 0;
    loop {
        let page = store.list(token.as_deref(), 3).await.unwrap();
        assert!(page.objects.len() <= 3);
        pages += 1;
        listed.extend(page.objects);
        match page.next {
            Some(next) => token = Some(next),
            None => break,
        }
        assert!(pages < 10, "the listing does not end");
    }
    let keys: Vec<_> = listed.iter().map(|o| (o.key.clone(), o.size)).collect();
    assert_eq!(
        keys, written,
        "every object once, in key order, with its size"
    );
    for object in &listed {
        // S3 servers keep whole seconds.
        assert!(
            object.written_at + 1_000 >= before && object.written_at <= after + 1_000,
            "written_at {} outside [{before}, {after}]",
            object.written_at
        );
    }
}

#[tokio::test]
async fn local_bodies_read_back_whole_and_overwrites_win() {
    let dir = tempfile::tempdir().unwrap();
    bodies_read_back_whole_and_overwrites_win(&LocalStore::open(dir.path()).unwrap()).await;
}

#[tokio::test]
async fn local_missing_objects_are_not_found_and_deletes_are_idempotent() {
    let dir = tempfile::tempdir().unwrap();
    missing_objects_are_not_found_and_deletes_are_idempotent(
        &LocalStore::open(dir.path()).unwrap(),
    )
    .await;
}

#[tokio::test]
async fn local_listings_page_through_every_object_once_in_key_order() {
    let dir = tempfile::tempdir().unwrap();
    let store = LocalStore::open(dir.path()).unwrap();
    // A file that no write of the store made is not listed.
    std::fs::create_dir_all(dir.path().join("acme").join("00")).unwrap();
    std::fs::write(dir.path().join("acme").join("00").join("notes.txt"), "x").unwrap();
    listings_page_through_every_object_once_in_key_order(&store).await;
}

#[tokio::test]
async fn local_objects_live_under_their_tenant_and_interrupted_writes_are_cleared() {
    let dir = tempfile::tempdir().unwrap();
    let store = LocalStore::open(dir.path()).unwrap();
    let key = PayloadKey::generate("acme").unwrap();
    store.put(&key, body(10, 6)).await.unwrap();
    let path = dir
        .path()
        .join("acme")
        .join(&key.object()[..2])
        .join(key.object());
    assert_eq!(std::fs::read(&path).unwrap(), body(10, 6));

    // A write cut short by a crash leaves a temporary file only, which the next open removes.
    let incoming = dir.path().join(".incoming");
    std::fs::write(incoming.join("0123"), "partial").unwrap();
    drop(store);
    let store = LocalStore::open(dir.path()).unwrap();
    assert_eq!(std::fs::read_dir(&incoming).unwrap().count(), 0);
    assert_eq!(store.get(&key).await.unwrap(), body(10, 6));
    store.ping().await.unwrap();
}

#[tokio::test]
async fn s3_bodies_read_back_whole_and_overwrites_win() {
    let server = S3Server::start().unwrap();
    bodies_read_back_whole_and_overwrites_win(&s3_store(&server, "payloads", "").await).await;
}

#[tokio::test]
async fn s3_missing_objects_are_not_found_and_deletes_are_idempotent() {
    let server = S3Server::start().unwrap();
    missing_objects_are_not_found_and_deletes_are_idempotent(
        &s3_store(&server, "payloads", "sluice").await,
    )
    .await;
}

#[tokio::test]
async fn s3_listings_page_through_every_object_once_in_key_order() {
    let server = S3Server::start().unwrap();
    let store = s3_store(&server, "payloads", "").await;
    // Another store's objects under a prefix in the same bucket are not Sluice keys of this
    // one: skipped.
    let other = s3_store(&server, "payloads", "other").await;
    other
        .put(&PayloadKey::generate("acme").unwrap(), body(1, 7))
        .await
        .unwrap();
    listings_page_through_every_object_once_in_key_order(&store).await;
    // And a prefixed store lists only its own.
    let page = other.list(None, 100).await.unwrap();
    assert_eq!(page.objects.len(), 1);
}

#[tokio::test]
async fn s3_unreachable_is_unavailable_quickly_never_not_found_and_recovers() {
    let server = S3Server::start().unwrap();
    let store = s3_store(&server, "payloads", "").await;
    let key = PayloadKey::generate("acme").unwrap();
    store.put(&key, body(100, 8)).await.unwrap();

    server.kill();
    let started = Instant::now();
    assert!(matches!(
        store.get(&key).await,
        Err(PayloadError::Unavailable(_))
    ));
    assert!(matches!(
        store.put(&key, body(10, 9)).await,
        Err(PayloadError::Unavailable(_))
    ));
    assert!(matches!(
        store.delete(&key).await,
        Err(PayloadError::Unavailable(_))
    ));
    assert!(matches!(
        store.list(None, 10).await,
        Err(PayloadError::Unavailable(_))
    ));
    assert!(matches!(
        store.ping().await,
        Err(PayloadError::Unavailable(_))
    ));
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "an unreachable store took {:?} to report",
        started.elapsed()
    );

    // moto keeps nothing across a restart: the bucket is made again, then the same client
    // works without being rebuilt.
    server.restart().unwrap();
    store.create_bucket_if_missing().await.unwrap();
    store.put(&key, body(100, 10)).await.unwrap();
    assert_eq!(store.get(&key).await.unwrap(), body(100, 10));
}
