//! Tenant catalog cases ([`Tenants`](sluice_engine::Tenants)): records, quotas, deletion and its tombstones.

use super::*;

/// Tenants: create, conflict, implicit tenants, quotas, list, delete with all resources.
pub async fn tenant_administration(ctx: Ctx) {
    let id = ctx.tenant.as_str().to_owned();
    let quotas = Quotas {
        max_queues: Some(2),
        ..Quotas::default()
    };
    let created = ctx
        .services
        .create_tenant(&id, quotas.clone())
        .await
        .unwrap();
    assert_eq!(created.quotas, quotas);
    assert!(matches!(
        ctx.services.create_tenant(&id, Quotas::default()).await,
        Err(ServiceError::Conflict(_))
    ));
    assert_eq!(ctx.services.get_tenant(&id).await.unwrap().quotas, quotas);

    ctx.queue("one", QueueConfigPatch::default()).await;
    ctx.queue("two", QueueConfigPatch::default()).await;
    assert!(matches!(
        ctx.services
            .put_queue(&ctx.tenant, "three", QueueConfigPatch::default())
            .await,
        Err(ServiceError::QuotaExceeded(_))
    ));
    // Replacing an existing queue's configuration is not a new queue.
    ctx.services
        .put_queue(&ctx.tenant, "two", QueueConfigPatch::default())
        .await
        .unwrap();

    // A tenant named only by a token exists once used.
    let implicit = ctx.other_tenant.as_str().to_owned();
    assert_eq!(
        ctx.services.get_tenant(&implicit).await,
        Err(ServiceError::TenantNotFound)
    );
    ctx.services
        .ensure_tenant(&ctx.other_tenant, None)
        .await
        .unwrap();
    ctx.services
        .ensure_tenant(&ctx.other_tenant, None)
        .await
        .unwrap();
    assert!(ctx.services.get_tenant(&implicit).await.is_ok());
    assert!(matches!(
        ctx.services
            .create_tenant(&implicit, Quotas::default())
            .await,
        Err(ServiceError::Conflict(_))
    ));
    let mut listed = Vec::new();
    let mut token = None;
    loop {
        let page = ctx
            .services
            .list_tenants(Some(1), token.as_deref())
            .await
            .unwrap();
        listed.extend(page.tenants.into_iter().map(|t| t.id.as_str().to_owned()));
        match page.next_token {
            Some(next) => token = Some(next),
            None => break,
        }
    }
    assert!(listed.contains(&id) && listed.contains(&implicit));
    assert!(
        listed.windows(2).all(|w| w[0] < w[1]),
        "ordered by id: {listed:?}"
    );

    ctx.services.delete_tenant(&id).await.unwrap();
    assert_eq!(
        ctx.services.get_tenant(&id).await,
        Err(ServiceError::TenantNotFound)
    );
    assert_eq!(
        ctx.services.get_queue(&ctx.tenant, "one").await,
        Err(ServiceError::QueueNotFound)
    );
    assert_eq!(
        ctx.services.delete_tenant(&id).await,
        Err(ServiceError::TenantNotFound)
    );
}

/// Deleting a tenant while its queues are being created leaves no queue that answers but is
/// not listed: once the deletion answers, none of the tenant's queues answers at all, and the
/// registries agree (nothing listed or counted). Many rounds, to meet many interleavings.
pub async fn tenant_deletion_races_queue_creation(ctx: Ctx) {
    const ROUNDS: usize = 20;
    const CREATORS: usize = 6;
    const NAMES: usize = 6;
    for round in 0..ROUNDS {
        let tenant = TenantId::parse(&format!("{}-r{round}", ctx.tenant)).unwrap();
        ctx.services
            .create_tenant(tenant.as_str(), Quotas::default())
            .await
            .unwrap();
        // Something for the deletion to walk.
        ctx.services
            .put_queue(&tenant, "n0-0", QueueConfigPatch::default())
            .await
            .unwrap();
        let started = std::sync::Arc::new(tokio::sync::Barrier::new(CREATORS + 1));
        let mut creators = tokio::task::JoinSet::new();
        for c in 0..CREATORS {
            let (services, tenant, started) =
                (ctx.services.clone(), tenant.clone(), started.clone());
            creators.spawn(async move {
                started.wait().await;
                for n in 0..NAMES {
                    // Creations and replacements both, of names the walk has and has not seen.
                    let name = format!("n{}-{c}", n % 3);
                    match services
                        .put_queue(&tenant, &name, QueueConfigPatch::default())
                        .await
                    {
                        Ok(_) | Err(ServiceError::TenantDeleted(_)) => {}
                        Err(other) => panic!("put {name}: {other:?}"),
                    }
                    let _ = services.send(&tenant, &name, text("m")).await;
                }
            });
        }
        started.wait().await;
        ctx.services.delete_tenant(tenant.as_str()).await.unwrap();
        while let Some(done) = creators.join_next().await {
            done.unwrap();
        }

        let listed: Vec<String> = ctx
            .services
            .list_queues(&tenant, "", Some(1000), None)
            .await
            .unwrap()
            .queues
            .into_iter()
            .map(|q| q.name.as_str().to_owned())
            .collect();
        let mut answering = Vec::new();
        for n in 0..3 {
            for c in 0..CREATORS {
                let name = format!("n{n}-{c}");
                let answers = ctx.services.get_queue(&tenant, &name).await.is_ok()
                    || ctx.services.send(&tenant, &name, text("m")).await.is_ok();
                if answers {
                    assert!(
                        listed.contains(&name),
                        "round {round}: {name} answers but is not listed ({listed:?})"
                    );
                    answering.push(name);
                }
            }
        }
        assert_eq!(
            answering,
            Vec::<String>::new(),
            "round {round}: queues that outlived the deletion of their tenant"
        );
        // A second deletion reaches whatever is still registered.
        let _ = ctx.services.delete_tenant(tenant.as_str()).await;
        assert_eq!(ctx.engine.count_queues(&tenant).await.unwrap(), 0);
    }
}

/// Deleting a tenant revokes the tokens issued until then: they do not re-create it (with
/// default quotas or otherwise), and its queues cannot be created. A token issued after the
/// deletion re-creates it fresh; old tokens stay refused, also once it is re-created through
/// the admin API.
pub async fn deleted_tenant_refuses_tokens_issued_before(ctx: Ctx) {
    let s = &ctx.services;
    let t = &ctx.tenant;
    let id = t.as_str();
    let seconds = |ms: u64| ms / SECOND;
    let quotas = Quotas {
        max_queues: Some(1),
        ..Quotas::default()
    };
    s.create_tenant(id, quotas.clone()).await.unwrap();
    let issued = seconds(ctx.clock.now());
    s.ensure_tenant(t, Some(issued)).await.unwrap();
    s.ensure_tenant(t, None).await.unwrap();
    ctx.queue("q", QueueConfigPatch::default()).await;
    assert_eq!(s.first_valid_issue_second(t).await.unwrap(), None);

    ctx.clock.advance(10 * SECOND + 500);
    let deleted_at = ctx.clock.now();
    s.delete_tenant(id).await.unwrap();
    assert_eq!(
        s.first_valid_issue_second(t).await.unwrap(),
        Some(seconds(deleted_at) + 1)
    );
    ctx.clock.advance(5 * SECOND);
    // Before the deletion, in its very second (token times are whole seconds), or undated.
    for iat in [Some(issued), Some(seconds(deleted_at)), None] {
        assert!(
            matches!(
                s.ensure_tenant(t, iat).await,
                Err(ServiceError::TenantDeleted(_))
            ),
            "iat {iat:?}"
        );
    }
    assert_eq!(s.get_tenant(id).await, Err(ServiceError::TenantNotFound));
    assert!(matches!(
        s.put_queue(t, "q", QueueConfigPatch::default()).await,
        Err(ServiceError::TenantDeleted(_))
    ));
    assert_eq!(s.get_queue(t, "q").await, Err(ServiceError::QueueNotFound));

    // A token issued after the deletion: a fresh tenant, default quotas, no queues.
    let fresh = seconds(deleted_at) + 1;
    s.ensure_tenant(t, Some(fresh)).await.unwrap();
    assert_eq!(s.get_tenant(id).await.unwrap().quotas, Quotas::default());
    ctx.queue("q", QueueConfigPatch::default()).await;
    ctx.queue("r", QueueConfigPatch::default()).await;
    assert!(matches!(
        s.ensure_tenant(t, Some(issued)).await,
        Err(ServiceError::TenantDeleted(_))
    ));

    // Deleted again, then re-created by the admin API: old tokens stay refused.
    ctx.clock.advance(5 * SECOND);
    s.delete_tenant(id).await.unwrap();
    s.create_tenant(id, quotas.clone()).await.unwrap();
    assert!(matches!(
        s.ensure_tenant(t, Some(fresh)).await,
        Err(ServiceError::TenantDeleted(_))
    ));
    let newest = s.first_valid_issue_second(t).await.unwrap().unwrap();
    s.ensure_tenant(t, Some(newest)).await.unwrap();
    assert_eq!(s.get_tenant(id).await.unwrap().quotas, quotas);
    ctx.queue("q", QueueConfigPatch::default()).await;
}
