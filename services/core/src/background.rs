//! Background work: the periodic jobs a gateway runs beside its requests (retention expiry,
//! recovery of interrupted moves between queues and of interrupted topic fan-outs, redrive
//! tasks, the stored-bytes refresh behind `max_stored_bytes`, the queue-gauge sampler, and —
//! with a payload store — payload collection), and the supervisor that runs each of them.
//!
//! A job is one round of work repeated on a period. The supervisor runs every round as its own
//! task, so a round that panics is caught like one that fails: both are logged with the job's
//! name, counted in `sluice_background_runs_total{job, outcome}`, and the job carries on after
//! a backoff that doubles on each consecutive failure (up to [`MAX_BACKOFF`]) and resets on the
//! first success. Each round is timed in `sluice_background_run_duration_seconds{job}`. Time
//! comes from the services' clock, so tests move it instead of waiting.
//!
//! Every job here is safe to run on several gateways over one store at once: retention expiry
//! is idempotent (a message expires once, whoever removes it), transfer recovery completes each
//! interrupted move exactly once (the engine's steps are idempotent), fan-out recovery makes
//! each interrupted delivery exactly once (idempotent per publication and subscription), a redrive task is worked
//! on by the one gateway holding its lease (see `redrive.rs`), payload collection's steps are
//! idempotent (see `payload_gc.rs`), and sampling and the stored-bytes refresh only read.

use crate::metrics::QueueGauges;
use crate::payload_gc::{CollectorState, COLLECT_PERIOD};
use crate::{ServiceError, Services};
use sluice_engine::Clock;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};
use tokio::task::JoinHandle;

/// The longest pause after consecutive failed rounds.
pub(crate) const MAX_BACKOFF: Duration = Duration::from_secs(60);

/// The longest a paced job waits between rounds, however long its rounds take.
pub const MAX_PACED_PAUSE: Duration = Duration::from_secs(300);

/// How much longer than its last round the queue sampler rests: at most about 2% of a core.
const SAMPLER_REST: u32 = 49;

/// One round of a job's work.
type Round = Pin<Box<dyn Future<Output = Result<(), ServiceError>> + Send>>;

/// The gateway's background jobs, running until this is dropped (or [`stop`](Self::stop)ped).
#[derive(Debug)]
pub struct Background {
    jobs: Vec<JoinHandle<()>>,
}

impl Background {
    /// Starts the standard jobs over `services`: retention expiry, transfer and fan-out recovery every
    /// `expiry_period`, redrive tasks every [`ROUND_PERIOD`](crate::ROUND_PERIOD), tenants'
    /// stored bytes every second, the queue-gauge sampler every `sample_period`, and, when a
    /// payload store is configured, payload collection every 5 s.
    pub fn start(services: &Services, expiry_period: Duration, sample_period: Duration) -> Self {
        let clock = services.clock().clone();
        let expiry = {
            let services = services.clone();
            supervise(
                "retention_expiry",
                expiry_period,
                clock.clone(),
                move || {
                    let services = services.clone();
                    Box::pin(async move { services.expire_once().await })
                },
            )
        };
        let recovery = {
            let services = services.clone();
            supervise(
                "transfer_recovery",
                expiry_period,
                clock.clone(),
                move || {
                    let services = services.clone();
                    Box::pin(async move { services.recover_transfers_once().await })
                },
            )
        };
        let fanout = {
            let services = services.clone();
            supervise("fanout_recovery", expiry_period, clock.clone(), move || {
                let services = services.clone();
                Box::pin(async move { services.recover_publications_once().await })
            })
        };
        let redrive = {
            let services = services.clone();
            supervise(
                "redrive_tasks",
                crate::redrive::ROUND_PERIOD,
                clock.clone(),
                move || {
                    let services = services.clone();
                    Box::pin(async move { services.advance_redrive_tasks().await })
                },
            )
        };
        let stored_bytes = {
            let services = services.clone();
            supervise(
                "stored_bytes_refresh",
                crate::stored_bytes::REFRESH_PERIOD,
                clock.clone(),
                move || {
                    let services = services.clone();
                    Box::pin(async move { services.refresh_stored_bytes().await })
                },
            )
        };
        let sampler = {
            let services = services.clone();
            // The gauges' handles and last values, from walk to walk (see `metrics.rs`).
            let kept = Arc::new(Mutex::new(QueueGauges::default()));
            supervise_paced(
                "queue_sampler",
                sample_period,
                Some(SAMPLER_REST),
                clock,
                move || {
                    let (services, kept) = (services.clone(), kept.clone());
                    Box::pin(async move {
                        // Taken out for the walk and put back after it, failed or not. A round
                        // that panics loses them: the next resolves its series afresh (and
                        // cannot zero those of queues deleted in between, which the recorder
                        // then forgets as it does any gauge left unset).
                        let mut gauges = std::mem::take(
                            &mut *kept.lock().unwrap_or_else(PoisonError::into_inner),
                        );
                        let result = services.sample_queues(&mut gauges).await;
                        *kept.lock().unwrap_or_else(PoisonError::into_inner) = gauges;
                        result
                    })
                },
            )
        };
        let mut jobs = vec![expiry, recovery, fanout, redrive, stored_bytes, sampler];
        if services.payload_settings().is_some() {
            let services = services.clone();
            // When the orphan sweeps last ran, from round to round.
            let state = Arc::new(tokio::sync::Mutex::new(CollectorState::default()));
            jobs.push(supervise(
                "payload_collection",
                COLLECT_PERIOD,
                services.clock().clone(),
                move || {
                    let (services, state) = (services.clone(), state.clone());
                    Box::pin(async move {
                        services
                            .collect_payloads_once(&mut *state.lock().await)
                            .await
                    })
                },
            ));
        }
        Self { jobs }
    }

    /// Stops every job; a round in progress is abandoned (each is safe to cut short).
    pub fn stop(self) {}
}

impl Drop for Background {
    fn drop(&mut self) {
        for job in &self.jobs {
            job.abort();
        }
    }
}

/// Runs `round` every `period` until the returned task is aborted, surviving its failures and
/// panics (see the module docs). The first round starts one period after the call.
pub(crate) fn supervise<F>(
    job: &'static str,
    period: Duration,
    clock: Arc<dyn Clock>,
    round: F,
) -> JoinHandle<()>
where
    F: Fn() -> Round + Send + 'static,
{
    supervise_paced(job, period, None, clock, round)
}

/// [`supervise`], and with `rest` a round that took `d` is followed by at least `rest × d`
/// (at most [`MAX_PACED_PAUSE`]) before the next begins: a job whose work grows with the
/// deployment (the sampler walks every queue) then uses at most about `1 / (rest + 1)` of a
/// core, and is simply less frequent on a large store.
pub(crate) fn supervise_paced<F>(
    job: &'static str,
    period: Duration,
    rest: Option<u32>,
    clock: Arc<dyn Clock>,
    round: F,
) -> JoinHandle<()>
where
    F: Fn() -> Round + Send + 'static,
{
    // Rounds are spaced from when the previous one began, read before the task starts, so
    // the schedule does not drift with how long a round or the spawn took.
    let mut began = clock.now();
    tokio::spawn(async move {
        let mut failures: u32 = 0;
        let mut pause = period;
        loop {
            clock.sleep_until(began.saturating_add(millis(pause))).await;
            began = clock.now();
            let started = Instant::now();
            // Its own task, so that a panic ends the round, not the job.
            let outcome = match tokio::spawn(round()).await {
                Ok(Ok(())) => "ok",
                Ok(Err(error)) => {
                    tracing::warn!(job, %error, failures = failures + 1, "background job failed");
                    "error"
                }
                Err(join) => {
                    let failures = failures + 1;
                    tracing::error!(job, error = %join, failures, "background job panicked");
                    "panic"
                }
            };
            metrics::counter!("sluice_background_runs_total", "job" => job, "outcome" => outcome)
                .increment(1);
            metrics::histogram!("sluice_background_run_duration_seconds", "job" => job)
                .record(started.elapsed().as_secs_f64());
            if outcome == "ok" {
                failures = 0;
                pause = match rest {
                    Some(rest) => period.max(
                        started
                            .elapsed()
                            .saturating_mul(rest + 1)
                            .min(MAX_PACED_PAUSE),
                    ),
                    None => period,
                };
            } else {
                failures = failures.saturating_add(1);
                pause = backoff(period, failures);
            }
        }
    })
}

/// The pause after `failures` consecutive failed rounds: the period doubled per failure, capped.
fn backoff(period: Duration, failures: u32) -> Duration {
    let factor = 1u32 << failures.min(16);
    period.saturating_mul(factor).min(MAX_BACKOFF.max(period))
}

fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use sluice_engine::ManualClock;
    use std::sync::atomic::{AtomicU32, Ordering};

    /// Waits (in real time, briefly) until `count` reaches `want`.
    async fn reaches(count: &AtomicU32, want: u32) {
        tokio::time::timeout(Duration::from_secs(10), async {
            while count.load(Ordering::SeqCst) < want {
                tokio::task::yield_now().await;
            }
        })
        .await
        .unwrap_or_else(|_| panic!("count stayed at {}", count.load(Ordering::SeqCst)));
    }

    #[test]
    fn backoff_doubles_per_failure_up_to_the_cap() {
        let period = Duration::from_secs(1);
        assert_eq!(backoff(period, 1), Duration::from_secs(2));
        assert_eq!(backoff(period, 3), Duration::from_secs(8));
        assert_eq!(backoff(period, 10), MAX_BACKOFF);
        assert_eq!(backoff(period, u32::MAX), MAX_BACKOFF);
        // A period longer than the cap is never shortened by a failure.
        let long = Duration::from_secs(120);
        assert_eq!(backoff(long, 2), long);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_job_survives_panics_and_errors_and_backs_off_between_them() {
        let clock = ManualClock::new(0);
        let rounds = Arc::new(AtomicU32::new(0));
        let counted = rounds.clone();
        let job = supervise(
            "flaky",
            Duration::from_secs(1),
            Arc::new(clock.clone()),
            move || {
                let n = counted.fetch_add(1, Ordering::SeqCst) + 1;
                Box::pin(async move {
                    match n {
                        1 => panic!("round one panics"),
                        2 => Err(ServiceError::Unavailable("store away".into())),
                        _ => Ok(()),
                    }
                })
            },
        );
        // Nothing runs before the first period has passed.
        tokio::task::yield_now().await;
        assert_eq!(rounds.load(Ordering::SeqCst), 0);
        clock.advance(1_000);
        reaches(&rounds, 1).await;
        // After the panic the job waits 2 s, not 1 s: a second elapses with no round.
        clock.advance(1_000);
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert_eq!(
            rounds.load(Ordering::SeqCst),
            1,
            "backing off after a panic"
        );
        clock.advance(1_000);
        reaches(&rounds, 2).await;
        // After the error (second failure in a row) it waits 4 s.
        clock.advance(3_000);
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert_eq!(rounds.load(Ordering::SeqCst), 2, "backing off longer");
        clock.advance(1_000);
        reaches(&rounds, 3).await;
        // Success resets the pause to the period.
        clock.advance(1_000);
        reaches(&rounds, 4).await;
        job.abort();
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_paced_job_rests_in_proportion_to_its_rounds() {
        let starts = Arc::new(Mutex::new(Vec::new()));
        let job = {
            let starts = starts.clone();
            supervise_paced(
                "paced",
                Duration::from_millis(1),
                Some(3),
                Arc::new(sluice_engine::SystemClock),
                move || {
                    let starts = starts.clone();
                    Box::pin(async move {
                        starts.lock().unwrap().push(Instant::now());
                        tokio::time::sleep(Duration::from_millis(40)).await;
                        Ok(())
                    })
                },
            )
        };
        tokio::time::timeout(Duration::from_secs(10), async {
            while starts.lock().unwrap().len() < 3 {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        })
        .await
        .unwrap();
        job.abort();
        let starts = starts.lock().unwrap();
        for pair in starts.windows(2) {
            // A 40 ms round rests 3 × 40 ms more: rounds begin at least 160 ms apart, not 1 ms.
            assert!(
                pair[1] - pair[0] >= Duration::from_millis(160),
                "{:?}",
                pair[1] - pair[0]
            );
        }
    }
}
