//! Turns a run's JSON-lines records into the peer comparison section of BENCHMARKS.md, between
//! `<!-- peers:start -->` and `<!-- peers:end -->`. Everything outside the markers (the
//! in-process benches, the analysis of what bounds each figure) is left untouched.
//!
//! Ratios are taken per repetition (the repetitions alternate between targets, so the two sides
//! of one ratio ran minutes apart at most) and the median of those ratios is reported, with the
//! individual ratios beside it.

use crate::fleet::FleetReport;
use crate::load::RunReport;
use crate::stats::median;
use anyhow::{bail, Context, Result};
use serde_json::Value;
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;

pub(crate) const START: &str = "<!-- peers:start -->";
pub(crate) const END: &str = "<!-- peers:end -->";

/// Targets in table order, with their display names.
const TARGETS: &[(&str, &str)] = &[
    ("sluice-embedded", "Sluice (embedded)"),
    ("sluice-redis", "Sluice (Redis)"),
    ("rabbitmq", "RabbitMQ"),
    ("moto", "moto (SQS)"),
    ("http-noop", "HTTP no-op ceiling"),
];

fn display(target: &str) -> &str {
    TARGETS
        .iter()
        .find(|(k, _)| *k == target)
        .map_or(target, |(_, v)| v)
}

#[derive(Default)]
struct Records {
    loads: Vec<RunReport>,
    fleets: Vec<FleetReport>,
    notes: Vec<Value>,
}

impl Records {
    fn read(path: &Path) -> Result<Self> {
        let text =
            std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
        let mut r = Records::default();
        for (i, line) in text
            .lines()
            .enumerate()
            .filter(|(_, l)| !l.trim().is_empty())
        {
            let v: Value = serde_json::from_str(line).with_context(|| format!("line {}", i + 1))?;
            match v["record"].as_str() {
                Some("load") => r.loads.push(serde_json::from_value(v)?),
                Some("queues") => r.fleets.push(serde_json::from_value(v)?),
                Some("note") => r.notes.push(v),
                other => bail!("line {}: unknown record {other:?}", i + 1),
            }
        }
        Ok(r)
    }

    fn loads(&self, scenario: &str, target: &str) -> Vec<&RunReport> {
        let mut v: Vec<&RunReport> = self
            .loads
            .iter()
            .filter(|r| r.scenario == scenario && r.target == target)
            .collect();
        v.sort_by_key(|r| r.rep);
        v
    }

    /// Why a (scenario, target) has no figures, from the notes.
    fn why_missing(&self, scenario: &str, target: &str) -> Option<String> {
        self.notes
            .iter()
            .find(|n| n["scenario"] == scenario && n["target"] == target && n["status"] != "ok")
            .map(|n| {
                format!(
                    "{}{}",
                    n["status"].as_str().unwrap_or("missing"),
                    n["detail"]
                        .as_str()
                        .filter(|d| !d.is_empty())
                        .map(|d| format!(": {d}"))
                        .unwrap_or_default()
                )
            })
    }

    fn median_e2e(&self, scenario: &str, target: &str) -> Option<f64> {
        median(
            &self
                .loads(scenario, target)
                .iter()
                .map(|r| r.e2e_rate)
                .collect::<Vec<_>>(),
        )
    }

    /// Per-repetition ratios of end-to-end msgs/s, matched by repetition number.
    fn ratios(&self, scenario: &str, num: &str, den: &str) -> Vec<f64> {
        let dens = self.loads(scenario, den);
        self.loads(scenario, num)
            .iter()
            .filter_map(|n| {
                dens.iter()
                    .find(|d| d.rep == n.rep && d.e2e_rate > 0.0)
                    .map(|d| n.e2e_rate / d.e2e_rate)
            })
            .collect()
    }
}

fn mib(bytes: Option<u64>) -> String {
    bytes.map_or("-".into(), |b| format!("{:.1}", b as f64 / 1048576.0))
}

fn num(x: f64) -> String {
    if !x.is_finite() {
        return "-".into();
    }
    // Thousands separators: these tables are read by people.
    let s = format!("{:.0}", x.abs());
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    if x < 0.0 {
        format!("-{out}")
    } else {
        out
    }
}

/// Large figures with separators, small ones (latencies in ms) with three decimals.
fn figure(x: f64) -> String {
    if x.abs() >= 100.0 {
        num(x)
    } else {
        format!("{x:.3}")
    }
}

fn ms(x: Option<f64>) -> String {
    x.map_or("-".into(), |v| format!("{v:.2}"))
}

fn med<F: Fn(&RunReport) -> Option<f64>>(runs: &[&RunReport], f: F) -> Option<f64> {
    median(&runs.iter().filter_map(|r| f(r)).collect::<Vec<_>>())
}

/// Lost messages over the runs; when a run stopped draining at its deadline, the messages
/// still queued then are not known lost, and the cell says so.
fn lost_cell(runs: &[&RunReport]) -> String {
    let lost: u64 = runs.iter().map(|r| r.lost).sum();
    if runs.iter().any(|r| r.drain_timed_out) {
        format!(
            "{} not received before the drain deadline",
            num(lost as f64)
        )
    } else {
        num(lost as f64)
    }
}

fn ratio_cell(records: &Records, scenario: &str, num: &str, den: &str) -> String {
    let ratios = records.ratios(scenario, num, den);
    match median(&ratios) {
        Some(m) => format!(
            "**{m:.2}x** ({})",
            ratios
                .iter()
                .map(|r| format!("{r:.2}"))
                .collect::<Vec<_>>()
                .join(", ")
        ),
        None => {
            let why = records
                .why_missing(scenario, num)
                .or_else(|| records.why_missing(scenario, den))
                .unwrap_or_else(|| "no runs".into());
            format!("n/a ({why})")
        }
    }
}

fn throughput_table(out: &mut String, records: &Records, scenario: &str) -> Result<()> {
    writeln!(
        out,
        "| target | end-to-end msgs/s per run | **median** | sent msgs/s (median) | send p50 / p99 (ms) | \
         server cores | load-gen cores | sent | lost | duplicates | errors |"
    )?;
    writeln!(out, "|---|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|")?;
    for (key, name) in TARGETS {
        let runs = records.loads(scenario, key);
        if runs.is_empty() {
            let why = records
                .why_missing(scenario, key)
                .unwrap_or_else(|| "not run".into());
            writeln!(out, "| {name} | {why} | | | | | | | | | |")?;
            continue;
        }
        let per_run = runs
            .iter()
            .map(|r| num(r.e2e_rate))
            .collect::<Vec<_>>()
            .join(", ");
        let verified = runs.iter().all(|r| r.verified);
        let sum = |f: fn(&RunReport) -> u64| runs.iter().map(|r| f(r)).sum::<u64>();
        writeln!(
            out,
            "| {name} | {per_run} | **{}** | {} | {} / {} | {} | {} | {} | {} | {} | {} |",
            num(med(&runs, |r| Some(r.e2e_rate)).unwrap_or(f64::NAN)),
            num(med(&runs, |r| Some(r.send_rate)).unwrap_or(f64::NAN)),
            ms(med(&runs, |r| r.send_latency.as_ref().map(|l| l.p50_ms))),
            ms(med(&runs, |r| r.send_latency.as_ref().map(|l| l.p99_ms))),
            med(&runs, |r| r.server_cores).map_or("-".into(), |c| format!("{c:.2}")),
            med(&runs, |r| Some(r.client_cores)).map_or("-".into(), |c| format!("{c:.2}")),
            num(sum(|r| r.sent) as f64),
            if verified {
                lost_cell(&runs)
            } else {
                "-".into()
            },
            if verified {
                num(sum(|r| r.duplicates) as f64)
            } else {
                "-".into()
            },
            num(sum(|r| r.errors) as f64),
        )?;
    }
    Ok(())
}

fn target_row(
    out: &mut String,
    what: &str,
    figure: Option<f64>,
    shown: String,
    goal: f64,
    higher_is_better: bool,
) -> Result<()> {
    let status = match figure {
        None => "not measured".to_owned(),
        Some(f) if (higher_is_better && f >= goal) || (!higher_is_better && f <= goal) => {
            "**met**".to_owned()
        }
        Some(f) => format!(
            "**missed** ({:.2}x of the target)",
            if higher_is_better { f / goal } else { goal / f }
        ),
    };
    writeln!(out, "| {what} | {shown} | {status} |")?;
    Ok(())
}

fn render(records: &Records, meta: &[(String, String)]) -> Result<String> {
    let mut out = String::new();
    writeln!(out, "{START}")?;
    writeln!(
        out,
        "<!-- Generated by `tests/bench/run.sh` (sluice-bench report); edits between these markers are overwritten. -->"
    )?;
    writeln!(out)?;
    writeln!(out, "### The run")?;
    writeln!(out)?;
    writeln!(out, "| | |")?;
    writeln!(out, "|---|---|")?;
    for (k, v) in meta {
        writeln!(out, "| {k} | {v} |")?;
    }
    writeln!(out)?;

    writeln!(
        out,
        "### Ratios (median of per-repetition ratios of end-to-end msgs/s; the runs in brackets)"
    )?;
    writeln!(out)?;
    writeln!(
        out,
        "| ratio | (a) batches of 10 | (b) batches of 1 | (d) FIFO, 100 groups |"
    )?;
    writeln!(out, "|---|---|---|---|")?;
    for (num_key, den_key) in [
        ("sluice-embedded", "rabbitmq"),
        ("sluice-redis", "rabbitmq"),
        ("sluice-embedded", "moto"),
        ("sluice-redis", "moto"),
        ("sluice-embedded", "http-noop"),
        ("sluice-redis", "http-noop"),
    ] {
        writeln!(
            out,
            "| {} / {} | {} | {} | {} |",
            display(num_key),
            display(den_key),
            ratio_cell(records, "a", num_key, den_key),
            ratio_cell(records, "b", num_key, den_key),
            ratio_cell(records, "d", num_key, den_key)
        )?;
    }
    writeln!(out)?;

    writeln!(out, "### Targets")?;
    writeln!(out)?;
    writeln!(out, "| target | measured | status |")?;
    writeln!(out, "|---|---|---|")?;
    let a_emb = records.median_e2e("a", "sluice-embedded");
    target_row(
        &mut out,
        "(a) embedded ≥ 50,000 msgs/s end to end",
        a_emb,
        a_emb.map_or("-".into(), num),
        50_000.0,
        true,
    )?;
    let r = median(&records.ratios("a", "sluice-embedded", "rabbitmq"));
    target_row(
        &mut out,
        "(a) embedded ≥ 1.5x RabbitMQ",
        r,
        r.map_or("-".into(), |x| format!("{x:.2}x")),
        1.5,
        true,
    )?;
    let r = median(&records.ratios("a", "sluice-redis", "rabbitmq"));
    let shown = r.map_or_else(
        || {
            records
                .why_missing("a", "sluice-redis")
                .unwrap_or_else(|| "-".into())
        },
        |x| format!("{x:.2}x"),
    );
    target_row(
        &mut out,
        "(a) Redis engine ≥ 1x RabbitMQ",
        r,
        shown,
        1.0,
        true,
    )?;
    let b_emb = records.median_e2e("b", "sluice-embedded");
    target_row(
        &mut out,
        "(b) embedded ≥ 10,000 msgs/s",
        b_emb,
        b_emb.map_or("-".into(), num),
        10_000.0,
        true,
    )?;
    for (key, name) in [
        ("sluice-embedded", "embedded"),
        ("sluice-redis", "Redis engine"),
    ] {
        let runs = records.loads("c", key);
        let p99 = med(&runs, |r| r.send_latency.as_ref().map(|l| l.p99_ms));
        if p99.is_some() || key == "sluice-embedded" {
            target_row(
                &mut out,
                &format!("(c) p99 send ≤ 5 ms at 1,000 msgs/s ({name})"),
                p99,
                ms(p99) + " ms",
                5.0,
                false,
            )?;
        }
    }
    let f = records
        .loads("f", "sluice-embedded")
        .iter()
        .filter_map(|r| r.backlog.as_ref().and_then(|b| b.bytes_per_message))
        .collect::<Vec<_>>();
    let f = median(&f);
    target_row(
        &mut out,
        "(f) embedded ≤ 300 B of RSS per queued message",
        f,
        f.map_or("-".into(), |x| format!("{x:.0} B")),
        300.0,
        false,
    )?;
    writeln!(out)?;

    writeln!(
        out,
        "### (a) Throughput: 8 producers + 8 consumers, one queue, 1 KiB, batches of 10"
    )?;
    writeln!(out)?;
    throughput_table(&mut out, records, "a")?;
    writeln!(out)?;
    writeln!(out, "### (b) The same with batches of 1")?;
    writeln!(out)?;
    throughput_table(&mut out, records, "b")?;
    writeln!(out)?;

    writeln!(
        out,
        "### (c) Latency at a fixed 1,000 msgs/s (single sends; receives of up to 10; medians over the runs)"
    )?;
    writeln!(out)?;
    writeln!(
        out,
        "| target | achieved msgs/s | send p50 | send p99 | send p99.9 | end-to-end p50 | end-to-end p99 | end-to-end p99.9 | send p99 per run | lost | duplicates |"
    )?;
    writeln!(out, "|---|--:|--:|--:|--:|--:|--:|--:|---|--:|--:|")?;
    for (key, name) in TARGETS {
        let runs = records.loads("c", key);
        if runs.is_empty() {
            let why = records
                .why_missing("c", key)
                .unwrap_or_else(|| "not run".into());
            writeln!(out, "| {name} | {why} | | | | | | | | | |")?;
            continue;
        }
        let per_run = runs
            .iter()
            .map(|r| ms(r.send_latency.as_ref().map(|l| l.p99_ms)))
            .collect::<Vec<_>>()
            .join(", ");
        let sl = |f: fn(&crate::stats::Percentiles) -> f64| {
            med(&runs, |r| r.send_latency.as_ref().map(f))
        };
        let el = |f: fn(&crate::stats::Percentiles) -> f64| {
            med(&runs, |r| r.e2e_latency.as_ref().map(f))
        };
        writeln!(
            out,
            "| {name} | {} | {} | {} | {} | {} | {} | {} | {per_run} | {} | {} |",
            num(med(&runs, |r| Some(r.e2e_rate)).unwrap_or(f64::NAN)),
            ms(sl(|p| p.p50_ms)),
            ms(sl(|p| p.p99_ms)),
            ms(sl(|p| p.p999_ms)),
            ms(el(|p| p.p50_ms)),
            ms(el(|p| p.p99_ms)),
            ms(el(|p| p.p999_ms)),
            lost_cell(&runs),
            runs.iter().map(|r| r.duplicates).sum::<u64>(),
        )?;
    }
    writeln!(out)?;
    writeln!(out, "Latencies in ms. Send latency runs from the intended send time of the paced schedule, so a producer that falls behind is charged for the wait.")?;
    writeln!(out)?;

    writeln!(out, "### (d) FIFO, 100 groups (batches of 10)")?;
    writeln!(out)?;
    if TARGETS
        .iter()
        .any(|(k, _)| !records.loads("d", k).is_empty())
    {
        throughput_table(&mut out, records, "d")?;
        writeln!(out)?;
        let checked: Vec<String> = TARGETS
            .iter()
            .filter_map(|(key, name)| {
                let runs = records.loads("d", key);
                (!runs.is_empty()).then(|| {
                    format!(
                        "{name} {}",
                        runs.iter().map(|r| r.order_violations).sum::<u64>()
                    )
                })
            })
            .collect();
        writeln!(
            out,
            "Messages received out of send order within their group (per producer): {}.",
            checked.join(", ")
        )?;
    } else {
        for (key, name) in TARGETS {
            if let Some(why) = records.why_missing("d", key) {
                writeln!(out, "* {name}: {why}")?;
            }
        }
    }
    writeln!(out)?;

    writeln!(
        out,
        "### (e) Many queues holding few messages: memory per idle queue"
    )?;
    writeln!(out)?;
    writeln!(out, "| target | queues | messages each | queues/s created | RSS before (MiB) | RSS after (MiB) | **bytes per queue** | errors |")?;
    writeln!(out, "|---|--:|--:|--:|--:|--:|--:|--:|")?;
    for (key, name) in TARGETS {
        match records.fleets.iter().find(|f| f.target == *key) {
            Some(f) => writeln!(
                out,
                "| {name} | {} | {} | {} | {} | {} | **{}** | {} |",
                num(f.queues as f64),
                f.per_queue,
                num(f.queues_per_second),
                mib(f.rss_before),
                mib(f.rss_after),
                f.bytes_per_queue.map_or("-".into(), num),
                f.errors
            )?,
            None => {
                if let Some(why) = records.why_missing("e", key) {
                    writeln!(out, "| {name} | {why} | | | | | | |")?;
                }
            }
        }
    }
    writeln!(out)?;

    writeln!(
        out,
        "### (f) Backlog: enqueue, then drain (1 KiB, batches of 10, 8 producers then 8 consumers)"
    )?;
    writeln!(out)?;
    writeln!(out, "| target | messages | fill msgs/s | drain msgs/s | RSS before (MiB) | RSS with backlog (MiB) | peak RSS (MiB) | **RSS per queued message** | lost | duplicates | errors |")?;
    writeln!(out, "|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|")?;
    for (key, name) in TARGETS {
        let runs = records.loads("f", key);
        let Some(r) = runs.first() else {
            if let Some(why) = records.why_missing("f", key) {
                writeln!(out, "| {name} | {why} | | | | | | | | | |")?;
            }
            continue;
        };
        let b = r.backlog.as_ref();
        writeln!(
            out,
            "| {name} | {} | {} | {} | {} | {} | {} | **{}** | {} | {} | {} |",
            num(r.sent as f64),
            b.map_or("-".into(), |b| num(b.fill_rate)),
            b.map_or("-".into(), |b| num(b.drain_rate)),
            mib(r.server_rss_start),
            mib(b.and_then(|b| b.rss_full)),
            mib(r.server_rss_peak),
            b.and_then(|b| b.bytes_per_message)
                .map_or("-".into(), |x| format!("{} B", num(x))),
            lost_cell(&runs),
            r.duplicates,
            r.errors
        )?;
    }
    writeln!(out)?;

    let ceilings: Vec<&Value> = records
        .notes
        .iter()
        .filter(|n| n["scenario"] == "ceiling")
        .collect();
    if !ceilings.is_empty() {
        writeln!(out, "### Ceilings on this machine")?;
        writeln!(out)?;
        for n in ceilings {
            let values = n["values"]
                .as_object()
                .map(|m| {
                    m.iter()
                        .map(|(k, v)| format!("{k} {}", v.as_f64().map_or("-".into(), figure)))
                        .collect::<Vec<_>>()
                        .join(", ")
                })
                .unwrap_or_default();
            writeln!(
                out,
                "* {}: {values}{}",
                n["target"].as_str().unwrap_or("?"),
                n["detail"]
                    .as_str()
                    .filter(|d| !d.is_empty())
                    .map(|d| format!(" ({d})"))
                    .unwrap_or_default()
            )?;
        }
        writeln!(out)?;
    }

    // "Not available" and "skipped" are shown in their scenario's table; failures are listed
    // here too, with the error counts of the runs that went through.
    let others: Vec<&Value> = records
        .notes
        .iter()
        .filter(|n| n["status"] == "failed")
        .collect();
    let errors: BTreeMap<String, u64> = records.loads.iter().fold(BTreeMap::new(), |mut m, r| {
        for (k, v) in &r.error_kinds {
            *m.entry(format!("{}/{}: {k}", r.scenario, r.target))
                .or_insert(0) += v;
        }
        m
    });
    if !others.is_empty() || !errors.is_empty() {
        writeln!(out, "### Failures and errors in this run")?;
        writeln!(out)?;
        for n in others {
            writeln!(
                out,
                "* ({}) {}: {} {}",
                n["scenario"].as_str().unwrap_or("?"),
                display(n["target"].as_str().unwrap_or("?")),
                n["status"].as_str().unwrap_or(""),
                n["detail"].as_str().unwrap_or("")
            )?;
        }
        for (k, v) in errors {
            writeln!(out, "* {k} (x{v})")?;
        }
        writeln!(out)?;
    }
    write!(out, "{END}")?;
    Ok(out)
}

/// Replaces the marked section of `markdown` (appending one if the markers are missing).
pub(crate) fn rewrite(results: &Path, markdown: &Path, meta: &[String]) -> Result<()> {
    let records = Records::read(results)?;
    let meta = meta
        .iter()
        .map(|m| {
            m.split_once('=')
                .map(|(k, v)| (k.trim().to_owned(), v.trim().to_owned()))
                .with_context(|| format!("--meta {m:?}: expected KEY=VALUE"))
        })
        .collect::<Result<Vec<_>>>()?;
    let section = render(&records, &meta)?;
    let text = std::fs::read_to_string(markdown)
        .with_context(|| format!("reading {}", markdown.display()))?;
    let updated = match (text.find(START), text.find(END)) {
        (Some(s), Some(e)) if e > s => format!("{}{section}{}", &text[..s], &text[e + END.len()..]),
        _ => format!("{}\n\n{section}\n", text.trim_end()),
    };
    std::fs::write(markdown, updated).with_context(|| format!("writing {}", markdown.display()))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn thousands_separators() {
        assert_eq!(num(1234567.4), "1,234,567");
        assert_eq!(num(999.0), "999");
        assert_eq!(num(-1000.0), "-1,000");
        assert_eq!(num(f64::NAN), "-");
    }

    #[test]
    fn replaces_only_between_markers() -> Result<()> {
        let dir = std::env::temp_dir().join(format!("sluice-bench-report-{}", std::process::id()));
        std::fs::create_dir_all(&dir)?;
        let md = dir.join("B.md");
        let results = dir.join("r.jsonl");
        std::fs::write(&md, format!("head\n{START}\nold\n{END}\ntail\n"))?;
        std::fs::write(
            &results,
            r#"{"record":"note","scenario":"d","target":"sluice-embedded","status":"not available","detail":"FIFO answered 400","values":{}}"#,
        )?;
        rewrite(&results, &md, &["Mode=quick".into()])?;
        let text = std::fs::read_to_string(&md)?;
        assert!(text.starts_with("head\n<!-- peers:start -->"));
        assert!(text.ends_with("<!-- peers:end -->\ntail\n"));
        assert!(!text.contains("\nold\n"));
        assert!(text.contains("* Sluice (embedded): not available: FIFO answered 400"));
        assert!(text.contains("| Mode | quick |"));
        std::fs::remove_dir_all(&dir)?;
        Ok(())
    }
}
