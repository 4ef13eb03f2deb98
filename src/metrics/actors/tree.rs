//! The live actor tree as JSON: per loaded model version, the supervisor, its instances, the
//! scheduler (batcher or sequence actor) and an ensemble's steps, each read from the actor's own
//! published figures (`tritium_actors::figures`), the same ones `/metrics` renders.

use std::time::{Duration, Instant};

use serde_json::{json, Value};
use tritium_actors::figures::Restarts;
use tritium_actors::histogram::HistogramSnapshot;
use tritium_actors::policy::{SchedulerPolicy, SequenceStrategy};

use super::busy::BusySamples;
use crate::repository::LoadedModel;

/// Which versions a request asks for (`?model=&version=`).
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Filter {
    pub model: Option<String>,
    pub version: Option<i64>,
}

impl Filter {
    /// Reads the query string; anything but one `model` and one integer `version` is refused.
    pub fn parse(query: &str) -> Result<Filter, String> {
        let pairs = actix_web::web::Query::<Vec<(String, String)>>::from_query(query)
            .map_err(|e| format!("malformed query string '{query}' for /v2/actors: {e}"))?
            .into_inner();
        let mut f = Filter::default();
        for (key, value) in pairs {
            match key.as_str() {
                "model" if f.model.is_some() => return Err("query parameter 'model' given more than once".into()),
                "model" if value.is_empty() => return Err("query parameter 'model' is empty".into()),
                "model" => f.model = Some(value),
                "version" if f.version.is_some() => return Err("query parameter 'version' given more than once".into()),
                "version" => {
                    let v = value.parse::<i64>().ok().filter(|v| *v > 0).ok_or_else(|| {
                        format!("query parameter 'version' must be a positive integer, got '{value}'")
                    })?;
                    f.version = Some(v);
                }
                other => {
                    return Err(format!(
                        "unknown query parameter '{other}' for /v2/actors: it takes 'model' and 'version'"
                    ))
                }
            }
        }
        if f.version.is_some() && f.model.is_none() {
            return Err("query parameter 'version' needs 'model'".into());
        }
        Ok(f)
    }

    pub fn wants(&self, m: &LoadedModel) -> bool {
        self.model.as_deref().is_none_or(|n| n == m.name()) && self.version.is_none_or(|v| v == m.version())
    }
}

fn histogram(h: &HistogramSnapshot) -> Value {
    let buckets: Vec<Value> = h.buckets.iter().map(|(le, n)| json!({"le": le, "count": n})).collect();
    json!({"buckets": buckets, "count": h.count, "sum": h.sum})
}

fn restarts(r: &Restarts) -> Value {
    json!({
        "load_failed": r.load_failed,
        "backend_failed": r.backend_failed,
        "panicked": r.panicked,
        "total": r.total(),
    })
}

fn scheduler_kind(m: &LoadedModel) -> &'static str {
    if m.steps.is_some() {
        return "ensemble";
    }
    match &m.handle.policy.scheduler {
        SchedulerPolicy::Direct => "direct",
        SchedulerPolicy::Dynamic(_) => "dynamic_batcher",
        SchedulerPolicy::Sequence(_) => "sequence_batcher",
    }
}

/// One model version's actors, at `at`.
pub fn version(m: &LoadedModel, busy: &BusySamples, at: Instant) -> Value {
    let f = m.handle.figures.snapshot();
    let policy = &m.handle.policy;
    let key = (m.namespace.clone(), m.name().to_string(), m.version());
    let busy_now: Vec<u64> = f.instances.iter().map(|i| i.busy_ns).collect();
    let second = busy.shares(&key, at, &busy_now, Duration::from_secs(1));
    let minute = busy.shares(&key, at, &busy_now, Duration::from_secs(60));
    let sequence = policy.sequence();
    let instances: Vec<Value> = policy
        .instances
        .iter()
        .zip(&f.instances)
        .enumerate()
        .map(|(i, (spec, inst))| {
            let alive = f.supervisor.alive[i];
            let mut v = json!({
                "name": spec.name,
                "state": if alive { "READY" } else { "UNAVAILABLE" },
                "alive": alive,
                "executions": inst.executions,
                "busy_us": inst.busy_ns / 1000,
                "busy_share_1s": second[i],
                "busy_share_60s": minute[i],
                "mailbox": inst.mailbox,
                "executing": inst.executing,
                "current_batch_size": if inst.executing { inst.batch_size } else { 0 },
                "last_batch_size": inst.batch_size,
                "restarts": restarts(&f.supervisor.restarts[i]),
            });
            if sequence.is_some() {
                v["sequence_slots_used"] = json!(f.sequence.slots_used[i]);
            }
            v
        })
        .collect();
    let total = f.supervisor.restarts.iter().fold(Restarts::default(), |a, r| Restarts {
        load_failed: a.load_failed + r.load_failed,
        backend_failed: a.backend_failed + r.backend_failed,
        panicked: a.panicked + r.panicked,
    });
    let stats = m.handle.stats.snapshot();
    let s = &f.scheduler;
    let mut out = json!({
        "name": m.name(),
        "version": m.version().to_string(),
        "namespace": m.namespace,
        "scheduler_kind": scheduler_kind(m),
        "max_batch_size": policy.max_batch_size,
        "decoupled": policy.decoupled,
        "supervisor": {
            "instances": policy.instances.len(),
            "live_instances": f.supervisor.live_instances(),
            "restarts": restarts(&total),
        },
        "instances": instances,
        "scheduler": {
            "queue_length": s.queue_len,
            "mailbox": s.mailbox,
            "pending": s.queue_len + s.mailbox,
            "queue_capacity": policy.queue_capacity,
            "batches": s.batches,
            "items": s.items,
            "direct": s.direct,
            "pulled": s.pulled,
            "lane_queued": s.lane_queued,
            "here": s.here,
            "batch_size": histogram(&s.batch_size),
            "batch_delay_us": histogram(&s.batch_delay_us),
        },
        "statistics": {
            "success": stats.success.0,
            "failure": stats.fail.0,
            "inference_count": stats.inference_count,
            "execution_count": stats.execution_count,
            "in_flight": stats.pending,
        },
        "sequence": Value::Null,
        "ensemble": Value::Null,
    });
    if let Some(seq) = sequence {
        let q = &f.sequence;
        // As the sequence actor counts them: max_batch_size slots per instance (one without
        // batching), or the oldest strategy's max_candidate_sequences when set.
        let per_instances = policy.max_batch_size.max(1) * policy.instances.len().max(1);
        let (strategy, slots) = match &seq.strategy {
            SequenceStrategy::Direct => ("direct", per_instances),
            SequenceStrategy::Oldest { max_candidate_sequences: n, .. } => {
                ("oldest", if *n > 0 { *n } else { per_instances })
            }
        };
        out["sequence"] = json!({
            "strategy": strategy,
            "slots": slots,
            "live": q.active,
            "backlog": q.backlog,
            "max_backlog": seq.max_backlog,
            "max_idle_us": seq.max_idle.as_micros() as u64,
            "idle_releases": q.idle_releases,
            "evictions": q.evictions,
            "state_bytes": q.state_bytes,
            "state_bytes_limit": q.state_bytes_limit,
            "slots_used": q.slots_used,
        });
    }
    if let Some(steps) = &m.steps {
        let steps: Vec<Value> = steps
            .steps
            .iter()
            .enumerate()
            .map(|(i, (model, h))| json!({"step": i + 1, "model": model, "latency_us": histogram(&h.snapshot())}))
            .collect();
        out["ensemble"] = json!({"steps": steps});
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_query_takes_model_and_version_and_refuses_the_rest() {
        assert_eq!(Filter::parse("").unwrap(), Filter::default());
        assert_eq!(
            Filter::parse("model=a%20b&version=3").unwrap(),
            Filter { model: Some("a b".into()), version: Some(3) }
        );
        for (bad, says) in [
            ("modle=x", "unknown query parameter 'modle'"),
            ("model=x&version=two", "positive integer, got 'two'"),
            ("model=x&version=0", "positive integer"),
            ("model=x&model=y", "more than once"),
            ("model=", "is empty"),
            ("version=1", "needs 'model'"),
        ] {
            let e = Filter::parse(bad).unwrap_err();
            assert!(e.contains(says), "{bad}: {e}");
        }
    }

    #[test]
    fn histograms_keep_prometheus_cumulative_buckets() {
        let h = HistogramSnapshot { buckets: vec![(1.0, 2), (2.0, 5)], count: 6, sum: 12.0 };
        assert_eq!(
            histogram(&h),
            json!({"buckets": [{"le": 1.0, "count": 2}, {"le": 2.0, "count": 5}], "count": 6, "sum": 12.0})
        );
    }
}
