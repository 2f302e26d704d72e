//! What filtering costs a publish: ns per message to match one message against the policies of
//! 1, 10 and 100 subscriptions, in the attribute scope and in the body scope, against the cost
//! of parsing the message's JSON body once (`serde_json::from_str::<Value>`, the physical
//! baseline: any body-scope match must at least do that). No I/O.
//!
//! Policies are a typical mix, one kind per subscription in turn: exact strings, a numeric
//! range, a prefix, `anything-but` a list, each with per-subscription constants so that some
//! subscriptions match and others do not (the count that matched is printed and checked to be
//! the same for every way of matching). Each scope is measured two ways:
//!
//! * **library**: the compiled policies matched against input prepared once per message
//!   (attributes already in a map; body parsed once, then `matches_body_json` per policy);
//! * **prepared per subscription** (how `services/core/src/topics.rs` matched until it was
//!   changed to prepare once, as the library way does): per subscription, the attributes are
//!   copied into a fresh `BTreeMap<String, AttributeValue>`, and a body policy calls
//!   `matches_body(&str)`, which parses the body again for every subscription. Kept as the
//!   measure of what preparing once saves.
//!
//! Each measurement runs a timing loop of about 0.3 s (`SLUICE_BENCH_QUICK=1`: 0.05 s); the
//! measurements rotate, 5 times over (quick: 1). Reported: the median ns per message, and the
//! median over repetitions of its ratio to the baseline measured in the same repetition.
//!
//! Run: `cargo bench -p sluice-filter --bench matching`.

use serde_json::Value;
use sluice_filter::{AttributeValue, FilterPolicy, FilterScope};
use std::collections::BTreeMap;
use std::hint::black_box;
use std::time::{Duration, Instant};

type BenchResult<T> = Result<T, Box<dyn std::error::Error>>;

const SUBSCRIPTIONS: [usize; 3] = [1, 10, 100];

/// The message every measurement matches: five attributes, and a JSON body of about 1 KiB
/// carrying the same fields (nested under `order`) plus the rest of a typical order event.
fn message() -> (Vec<(String, AttributeValue)>, String) {
    let attributes = vec![
        ("store".to_owned(), AttributeValue::new("String", "store-7")),
        ("price".to_owned(), AttributeValue::new("Number", "99.5")),
        (
            "kind".to_owned(),
            AttributeValue::new("String", "gift-card"),
        ),
        (
            "region".to_owned(),
            AttributeValue::new("String", "eu-west-3"),
        ),
        (
            "customer".to_owned(),
            AttributeValue::new("String", "c-0001234567"),
        ),
    ];
    let items: Vec<Value> = (0..6)
        .map(|i| {
            serde_json::json!({
                "sku": format!("SKU-{i:06}"), "quantity": i + 1, "unit_price": 12.5 + f64::from(i),
                "description": "a line of an order, as order events usually carry them"
            })
        })
        .collect();
    let body = serde_json::json!({
        "order": {
            "id": "8f14e45f-ceea-467f-a0e6-2c6b1a2b3c4d",
            "store": "store-7", "price": 99.5, "kind": "gift-card", "region": "eu-west-3",
            "created_at": "2026-12-04T17:00:00.000Z", "currency": "EUR",
            "items": items
        },
        "customer": {"id": "c-0001234567", "tier": "gold", "country": "FR"}
    })
    .to_string();
    (attributes, body)
}

/// Policy `i` of a subscription set, as JSON, for `scope` (body policies nest under `order`).
fn policy(i: usize, scope: FilterScope) -> String {
    let rule = match i % 4 {
        // Exact strings: matches for i ≡ 0 (mod 8), i.e. every other exact-string policy.
        0 => format!(r#""store": ["store-{}", "store-{}"]"#, i % 8 + 7, i + 100),
        // Numeric range: the message's 99.5 falls in it for half the subscriptions.
        1 => format!(
            r#""price": [{{"numeric": [">=", {}, "<", {}]}}]"#,
            (i % 2) * 100,
            (i % 2) * 100 + 150
        ),
        // Prefix: "gift" matches, "refund" does not.
        2 => format!(
            r#""kind": [{{"prefix": "{}"}}]"#,
            if i % 8 == 2 { "gift" } else { "refund" }
        ),
        // anything-but a list: excludes the message's region for every other policy.
        _ => format!(
            r#""region": [{{"anything-but": ["us-east-1", "{}"]}}]"#,
            if i % 8 == 3 {
                "eu-west-3"
            } else {
                "ap-south-1"
            }
        ),
    };
    match scope {
        FilterScope::Attributes => format!("{{{rule}}}"),
        FilterScope::Body => format!(r#"{{"order": {{{rule}}}}}"#),
    }
}

fn policies(n: usize, scope: FilterScope) -> BenchResult<Vec<FilterPolicy>> {
    (0..n)
        .map(|i| Ok(FilterPolicy::parse(&policy(i, scope), scope)?))
        .collect()
}

/// One way of matching a message against a subscription set; answers how many matched.
type Way<'a> = Box<dyn Fn() -> usize + 'a>;

/// Runs `way` repeatedly for about `budget`; answers ns per call and its last answer.
fn time(way: &Way<'_>, budget: Duration) -> (f64, usize) {
    // Calibrate: how many calls fill about a tenth of the budget.
    let mut batch = 1u64;
    let mut matched = 0;
    loop {
        let start = Instant::now();
        for _ in 0..batch {
            matched = black_box(way());
        }
        if start.elapsed() >= budget / 10 || batch >= 1 << 30 {
            break;
        }
        batch *= 2;
    }
    let start = Instant::now();
    let mut calls = 0u64;
    while start.elapsed() < budget {
        for _ in 0..batch {
            matched = black_box(way());
        }
        calls += batch;
    }
    (start.elapsed().as_nanos() as f64 / calls as f64, matched)
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

fn main() -> BenchResult<()> {
    let quick = std::env::var("SLUICE_BENCH_QUICK").is_ok_and(|v| !v.is_empty() && v != "0");
    let (budget, reps) = if quick {
        (Duration::from_millis(50), 1)
    } else {
        (Duration::from_millis(300), 5)
    };
    let (attribute_list, body) = message();
    let attributes: BTreeMap<String, AttributeValue> = attribute_list.iter().cloned().collect();
    let sets: Vec<(usize, Vec<FilterPolicy>, Vec<FilterPolicy>)> = SUBSCRIPTIONS
        .iter()
        .map(|&n| {
            Ok((
                n,
                policies(n, FilterScope::Attributes)?,
                policies(n, FilterScope::Body)?,
            ))
        })
        .collect::<BenchResult<_>>()?;

    // Every measurement, by name: (label, subscriptions, way).
    let mut ways: Vec<(String, usize, Way<'_>)> = Vec::new();
    let body_ref = body.as_str();
    ways.push((
        "baseline: parse the body once (`serde_json::from_str::<Value>`)".to_owned(),
        0,
        Box::new(move || usize::from(serde_json::from_str::<Value>(black_box(body_ref)).is_ok())),
    ));
    for (n, attr, body_policies) in &sets {
        let attributes = &attributes;
        let list = &attribute_list;
        ways.push((
            "attributes, library (map built once)".to_owned(),
            *n,
            Box::new(move || {
                attr.iter()
                    .filter(|p| p.matches_attributes(black_box(attributes)))
                    .count()
            }),
        ));
        ways.push((
            "attributes, prepared per subscription (map copied each time)".to_owned(),
            *n,
            Box::new(move || {
                attr.iter()
                    .filter(|p| {
                        let map: BTreeMap<String, AttributeValue> = black_box(list)
                            .iter()
                            .map(|(k, v)| {
                                (
                                    k.clone(),
                                    AttributeValue::new(v.data_type.clone(), v.value.clone()),
                                )
                            })
                            .collect();
                        p.matches_attributes(&map)
                    })
                    .count()
            }),
        ));
        ways.push((
            "body, library (parse once, `matches_body_json` per subscription)".to_owned(),
            *n,
            Box::new(move || {
                let Ok(value) = serde_json::from_str::<Value>(black_box(body_ref)) else {
                    return 0;
                };
                body_policies
                    .iter()
                    .filter(|p| p.matches_body_json(&value))
                    .count()
            }),
        ));
        ways.push((
            "body, prepared per subscription (`matches_body`: a parse each time)".to_owned(),
            *n,
            Box::new(move || {
                body_policies
                    .iter()
                    .filter(|p| p.matches_body(black_box(body_ref)))
                    .count()
            }),
        ));
    }

    println!(
        "## sluice-filter: matching cost{}",
        if quick { " (QUICK)" } else { "" }
    );
    println!();
    println!(
        "message: 5 attributes; body {} bytes of JSON; {reps} alternating repetitions of {} ms per measurement",
        body.len(),
        budget.as_millis()
    );
    println!();
    let mut samples: Vec<Vec<f64>> = vec![Vec::new(); ways.len()];
    let mut matched = vec![0; ways.len()];
    for rep in 0..reps {
        // Rotate the order each repetition, so no measurement always runs first.
        for k in 0..ways.len() {
            let i = (k + rep) % ways.len();
            let (ns, m) = time(&ways[i].2, budget);
            samples[i].push(ns);
            matched[i] = m;
        }
    }
    // Ratios to the baseline of the same repetition, then their median: steadier than the
    // ratio of medians on a shared machine.
    let ratio = |i: usize| {
        median(
            samples[i]
                .iter()
                .zip(&samples[0])
                .map(|(x, b)| x / b)
                .collect(),
        )
    };
    println!("| subscriptions | scope, how | matched | ns per message (runs) | **median ns** | ns per subscription | vs one body parse (median of per-rep ratios) |");
    println!("|---:|---|---:|---|---:|---:|---:|");
    for (i, (label, n, _)) in ways.iter().enumerate() {
        let m = median(samples[i].clone());
        let runs = samples[i]
            .iter()
            .map(|x| format!("{x:.0}"))
            .collect::<Vec<_>>()
            .join(", ");
        let per_sub = if *n > 0 {
            format!("{:.1}", m / *n as f64)
        } else {
            "-".to_owned()
        };
        println!(
            "| {} | {label} | {} | {runs} | **{m:.0}** | {per_sub} | {:.2}x |",
            if *n > 0 {
                n.to_string()
            } else {
                "-".to_owned()
            },
            if *n > 0 {
                matched[i].to_string()
            } else {
                "-".to_owned()
            },
            ratio(i),
        );
    }
    // Every way must agree on how many subscriptions the message matched.
    for (n, _, _) in &sets {
        let counts: Vec<usize> = ways
            .iter()
            .zip(&matched)
            .filter(|((_, k, _), _)| k == n)
            .map(|(_, m)| *m)
            .collect();
        if counts.windows(2).any(|w| w[0] != w[1]) {
            return Err(
                format!("{n} subscriptions: the ways disagree on matches: {counts:?}").into(),
            );
        }
    }
    Ok(())
}
