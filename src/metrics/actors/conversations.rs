//! `GET /v2/actors/conversations?model=&version=&offset=&limit=&sort=&order=&q=`: one page of a
//! sequence model's live conversations, sorted and searched by id.
//!
//! The rows come from the sequence actor itself, which answers a query message between two
//! batches (`ModelHandle::conversations`); nothing is added to a conversation's turn. The rows
//! of a model version are kept here for up to `FRESH` and shared by every request in that time,
//! so however many pages are open the actor is asked at most once a second; sorting, searching
//! and paging run here, on the metrics server's thread.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use tritium_actors::sequence::{Conversation, SortKey, TableQuery};
use tritium_actors::{CorrelationId, ErrorKind};

use crate::repository::LoadedModel;

/// How long one answer of the sequence actor serves every request.
pub const FRESH: Duration = Duration::from_secs(1);
/// How long the sequence actor may take to answer (its mailbox may be full of requests).
const ANSWER_WITHIN: Duration = Duration::from_secs(2);
/// The most rows one page may ask for.
pub const MAX_LIMIT: usize = 1000;
const MAX_SEARCH: usize = 256;

/// A request's parameters.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Params {
    pub model: String,
    pub version: Option<i64>,
    pub table: TableQuery,
}

fn once<'a>(slot: &mut Option<&'a str>, key: &str, value: &'a str) -> Result<(), String> {
    if slot.replace(value).is_some() {
        return Err(format!("query parameter '{key}' given more than once"));
    }
    Ok(())
}

fn number(key: &str, value: &str, min: usize, max: usize) -> Result<usize, String> {
    value
        .parse::<usize>()
        .ok()
        .filter(|n| (min..=max).contains(n))
        .ok_or_else(|| format!("query parameter '{key}' must be an integer from {min} to {max}, got '{value}'"))
}

impl Params {
    pub fn parse(query: &str) -> Result<Params, String> {
        let pairs = actix_web::web::Query::<Vec<(String, String)>>::from_query(query)
            .map_err(|e| format!("malformed query string '{query}' for /v2/actors/conversations: {e}"))?
            .into_inner();
        let [mut model, mut version, mut offset, mut limit, mut sort, mut order, mut q] = [None; 7];
        for (key, value) in &pairs {
            let slot = match key.as_str() {
                "model" => &mut model,
                "version" => &mut version,
                "offset" => &mut offset,
                "limit" => &mut limit,
                "sort" => &mut sort,
                "order" => &mut order,
                "q" => &mut q,
                other => {
                    return Err(format!(
                        "unknown query parameter '{other}' for /v2/actors/conversations: it takes 'model', 'version', \
                         'offset', 'limit', 'sort', 'order' and 'q'"
                    ))
                }
            };
            once(slot, key, value)?;
        }
        let model = match model {
            Some("") => return Err("query parameter 'model' is empty".into()),
            Some(m) => m.to_string(),
            None => return Err("query parameter 'model' is required: the conversations of which model?".into()),
        };
        let version = version
            .map(|v| {
                v.parse::<i64>()
                    .ok()
                    .filter(|v| *v > 0)
                    .ok_or_else(|| format!("query parameter 'version' must be a positive integer, got '{v}'"))
            })
            .transpose()?;
        let mut table = TableQuery::default();
        if let Some(v) = offset {
            table.offset = number("offset", v, 0, usize::MAX)?;
        }
        if let Some(v) = limit {
            table.limit = number("limit", v, 1, MAX_LIMIT)?;
        }
        if let Some(v) = sort {
            table.sort = SortKey::parse(v).ok_or_else(|| {
                format!("query parameter 'sort' must be one of {}, got '{v}'", SortKey::NAMES.join(", "))
            })?;
        }
        table.descending = match order {
            None | Some("asc") => false,
            Some("desc") => true,
            Some(v) => return Err(format!("query parameter 'order' must be 'asc' or 'desc', got '{v}'")),
        };
        if let Some(v) = q.filter(|v| !v.is_empty()) {
            if v.len() > MAX_SEARCH {
                return Err(format!("query parameter 'q' is longer than {MAX_SEARCH} bytes"));
            }
            table.search = Some(v.to_string());
        }
        Ok(Params { model, version, table })
    }
}

/// The version a request means: the one it names, else the highest loaded.
pub fn pick(models: Vec<Arc<LoadedModel>>, p: &Params) -> Result<Arc<LoadedModel>, String> {
    let found = models
        .into_iter()
        .filter(|m| m.name() == p.model && p.version.is_none_or(|v| v == m.version()))
        .max_by_key(|m| m.version());
    found.ok_or_else(|| {
        let version = p.version.map(|v| format!(" version {v}")).unwrap_or_default();
        format!("Request for unknown model: '{}'{version} is not loaded", p.model)
    })
}

type Key = (String, String, i64);
/// One answer of a sequence actor, and when it came.
type Answer = (Instant, Arc<Vec<Conversation>>);

/// The rows last asked of each sequence actor, and when.
#[derive(Default)]
pub struct Tables(tokio::sync::Mutex<HashMap<Key, Answer>>);

/// Why no page could be made: the HTTP status and the message.
pub struct Refusal(pub u16, pub String);

impl Tables {
    /// `m`'s rows, asked of its sequence actor unless an answer younger than `FRESH` is kept;
    /// with the time they were read. One request at a time asks, so watchers never multiply
    /// the actor's work.
    pub async fn rows(&self, m: &LoadedModel) -> Result<Answer, Refusal> {
        let mut kept = self.0.lock().await;
        let now = Instant::now();
        // Forget models not asked for a while (unloaded, or nobody watches them).
        kept.retain(|_, (at, _)| now.duration_since(*at) < FRESH * 10);
        let key = (m.namespace.clone(), m.name().to_string(), m.version());
        if let Some((at, rows)) = kept.get(&key).filter(|(at, _)| now.duration_since(*at) < FRESH) {
            return Ok((*at, rows.clone()));
        }
        let rows = m.handle.conversations(ANSWER_WITHIN).await.map_err(|e| {
            let status = if e.kind == ErrorKind::InvalidArgument { 400 } else { 503 };
            Refusal(status, e.message)
        })?;
        let at = Instant::now();
        let rows = Arc::new(rows);
        kept.insert(key, (at, rows.clone()));
        Ok((at, rows))
    }
}

fn row(m: &LoadedModel, c: &Conversation) -> Value {
    let (id, id_type) = match &c.id {
        CorrelationId::U64(v) => (v.to_string(), "uint64"),
        CorrelationId::Str(s) => (s.clone(), "string"),
    };
    let instance = c.instance.and_then(|i| m.handle.policy.instances.get(i)).map(|s| s.name.clone());
    json!({
        "id": id,
        "id_type": id_type,
        "instance": instance,
        "instance_index": c.instance,
        "slot": c.slot,
        "status": c.status.name(),
        "turns": c.turns,
        "queued": c.queued,
        "state_bytes": c.state_bytes,
        "idle_us": c.idle.as_micros() as u64,
    })
}

/// The JSON of one page of `m`'s conversations, read at `read_at`.
pub fn page(m: &LoadedModel, q: &TableQuery, rows: &[Conversation], read_at: Instant) -> Value {
    let page = q.page(rows);
    let sort = SortKey::NAMES[q.sort as usize];
    json!({
        "model": m.name(),
        "version": m.version().to_string(),
        "namespace": m.namespace,
        "total": page.total,
        "matched": page.matched,
        "offset": q.offset,
        "limit": q.limit,
        "sort": sort,
        "order": if q.descending { "desc" } else { "asc" },
        "q": q.search,
        "age_ms": read_at.elapsed().as_millis() as u64,
        "conversations": page.rows.iter().map(|c| row(m, c)).collect::<Vec<_>>(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_every_parameter() {
        let p = Params::parse("model=seq&version=2&offset=100&limit=25&sort=idle&order=desc&q=chat-1").unwrap();
        assert_eq!(p.model, "seq");
        assert_eq!(p.version, Some(2));
        let want =
            TableQuery { sort: SortKey::Idle, descending: true, search: Some("chat-1".into()), offset: 100, limit: 25 };
        assert_eq!(p.table, want);
        let p = Params::parse("model=seq&q=").unwrap();
        assert_eq!((p.version, p.table), (None, TableQuery::default()));
    }

    #[test]
    fn refuses_bad_parameters_saying_why() {
        let long = format!("model=m&q={}", "x".repeat(MAX_SEARCH + 1));
        for (bad, says) in [
            ("", "'model' is required"),
            ("model=", "'model' is empty"),
            ("model=m&model=n", "'model' given more than once"),
            ("model=m&version=0", "positive integer"),
            ("model=m&offset=-1", "'offset' must be an integer from 0"),
            ("model=m&limit=0", "'limit' must be an integer from 1 to 1000, got '0'"),
            ("model=m&limit=1001", "from 1 to 1000"),
            ("model=m&limit=ten", "got 'ten'"),
            ("model=m&sort=name", "'sort' must be one of id, instance, turns, state_bytes, idle, got 'name'"),
            ("model=m&order=up", "'order' must be 'asc' or 'desc'"),
            ("model=m&page=2", "unknown query parameter 'page'"),
            (long.as_str(), "longer than 256"),
        ] {
            let e = Params::parse(bad).unwrap_err();
            assert!(e.contains(says), "{bad}: {e}");
        }
    }
}
