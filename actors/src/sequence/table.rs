//! The table of live conversations, for whoever watches the sequence actor (`/v2/actors` and its
//! page): one row per sequence it holds or keeps in its backlog, and the sorting, searching and
//! paging of those rows.
//!
//! It is asked for, never pushed: the sequence actor copies its rows (`SequenceBatcher::
//! conversations`, one pass over its sequences) only when a `Conversations` message reaches it
//! between two batches, so a turn of a conversation costs nothing more whether or not anyone
//! watches. Sorting, searching and paging run on the caller's thread, not the actor's.

use std::cmp::Ordering;
use std::time::{Duration, Instant};

use super::SequenceBatcher;
use crate::request::CorrelationId;

/// Where a conversation is now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConversationStatus {
    /// One of its requests is executing on an instance.
    Running,
    /// It holds a slot and has a request queued for its turn.
    Queued,
    /// It holds a slot with nothing to run.
    Idle,
    /// It waits in the backlog for a slot.
    Waiting,
}

impl ConversationStatus {
    pub fn name(self) -> &'static str {
        match self {
            ConversationStatus::Running => "running",
            ConversationStatus::Queued => "queued",
            ConversationStatus::Idle => "idle",
            ConversationStatus::Waiting => "waiting",
        }
    }
}

/// One live conversation, as the sequence actor holds it.
#[derive(Debug, Clone, PartialEq)]
pub struct Conversation {
    pub id: CorrelationId,
    /// The instance it runs on now, or (`direct`) the instance of its slot.
    pub instance: Option<usize>,
    /// Its slot on that instance (`direct` strategy only).
    pub slot: Option<usize>,
    pub status: ConversationStatus,
    /// Requests of it dispatched since its START.
    pub turns: u64,
    /// Requests of it queued, not yet dispatched.
    pub queued: usize,
    /// Bytes of implicit state the engine holds for it.
    pub state_bytes: u64,
    /// Since its last activity (arrival of a request, dispatch or end of one).
    pub idle: Duration,
}

impl SequenceBatcher {
    /// Every live conversation, in no particular order, as of `now`: one pass over the
    /// sequences and one lock of the state store.
    pub fn conversations(&self, now: Instant) -> Vec<Conversation> {
        let bytes = self.store.bytes_of_each(self.sequences.keys());
        self.sequences
            .iter()
            .zip(bytes)
            .map(|((id, s), state_bytes)| {
                let status = if s.waiting {
                    ConversationStatus::Waiting
                } else if s.in_flight.is_some() {
                    ConversationStatus::Running
                } else if !s.queue.is_empty() {
                    ConversationStatus::Queued
                } else {
                    ConversationStatus::Idle
                };
                Conversation {
                    id: id.clone(),
                    instance: s.in_flight.or(s.slot.map(|(i, _)| i)),
                    slot: s.slot.map(|(_, k)| k),
                    status,
                    turns: s.turns,
                    queued: s.queue.len(),
                    state_bytes,
                    idle: now.saturating_duration_since(s.last_active),
                }
            })
            .collect()
    }
}

/// What a table can be sorted by.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SortKey {
    Id,
    Instance,
    Turns,
    StateBytes,
    Idle,
}

impl SortKey {
    pub const NAMES: [&'static str; 5] = ["id", "instance", "turns", "state_bytes", "idle"];

    pub fn parse(name: &str) -> Option<SortKey> {
        Some(match name {
            "id" => SortKey::Id,
            "instance" => SortKey::Instance,
            "turns" => SortKey::Turns,
            "state_bytes" => SortKey::StateBytes,
            "idle" => SortKey::Idle,
            _ => return None,
        })
    }
}

/// Which rows a caller wants: those whose id contains `search` (as text, case-sensitive), sorted
/// by `sort` (ties by id), then `limit` of them from `offset`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TableQuery {
    pub sort: SortKey,
    pub descending: bool,
    pub search: Option<String>,
    pub offset: usize,
    pub limit: usize,
}

impl Default for TableQuery {
    fn default() -> Self {
        TableQuery { sort: SortKey::Id, descending: false, search: None, offset: 0, limit: 50 }
    }
}

/// One page of the table.
#[derive(Debug, Clone, PartialEq)]
pub struct TablePage {
    /// Live conversations in all.
    pub total: usize,
    /// Of which match the search.
    pub matched: usize,
    pub rows: Vec<Conversation>,
}

/// `key`'s order (reversed when `descending`), then the id's, ascending, to break ties.
fn compare(key: SortKey, descending: bool, a: &Conversation, b: &Conversation) -> Ordering {
    let by = match key {
        SortKey::Id => a.id.cmp(&b.id),
        // Conversations on no instance (waiting, or idle under `oldest`) come last.
        SortKey::Instance => {
            (a.instance.is_none(), a.instance, a.slot).cmp(&(b.instance.is_none(), b.instance, b.slot))
        }
        SortKey::Turns => a.turns.cmp(&b.turns),
        SortKey::StateBytes => a.state_bytes.cmp(&b.state_bytes),
        SortKey::Idle => a.idle.cmp(&b.idle),
    };
    let by = if descending { by.reverse() } else { by };
    by.then_with(|| a.id.cmp(&b.id))
}

impl TableQuery {
    /// The page of `rows` this query asks for. Only the rows that match are sorted, and only as
    /// far as the page needs: O(n + k log k) for a page ending at row k, not a full sort.
    pub fn page(&self, rows: &[Conversation]) -> TablePage {
        let mut matched: Vec<&Conversation> = match &self.search {
            Some(s) => rows.iter().filter(|c| c.id.to_string().contains(s.as_str())).collect(),
            None => rows.iter().collect(),
        };
        let n = matched.len();
        let end = self.offset.saturating_add(self.limit).min(n);
        let cmp = |a: &&Conversation, b: &&Conversation| compare(self.sort, self.descending, a, b);
        if self.offset >= n || self.limit == 0 {
            return TablePage { total: rows.len(), matched: n, rows: Vec::new() };
        }
        if end < n {
            matched.select_nth_unstable_by(end, cmp);
            matched.truncate(end);
        }
        matched.sort_unstable_by(cmp);
        TablePage {
            total: rows.len(),
            matched: n,
            rows: matched[self.offset..end].iter().map(|c| (*c).clone()).collect(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(id: CorrelationId, instance: Option<usize>, turns: u64, bytes: u64, idle_ms: u64) -> Conversation {
        Conversation {
            id,
            instance,
            slot: instance.map(|_| 0),
            status: ConversationStatus::Idle,
            turns,
            queued: 0,
            state_bytes: bytes,
            idle: Duration::from_millis(idle_ms),
        }
    }

    fn ids(p: &TablePage) -> Vec<String> {
        p.rows.iter().map(|c| c.id.to_string()).collect()
    }

    fn rows() -> Vec<Conversation> {
        use CorrelationId::{Str, U64};
        vec![
            row(U64(30), Some(1), 5, 100, 10),
            row(U64(4), Some(0), 9, 300, 50),
            row(Str("chat-7".into()), None, 1, 0, 20),
            row(U64(17), Some(0), 9, 200, 40),
            row(Str("chat-12".into()), Some(1), 2, 50, 30),
        ]
    }

    #[test]
    fn sorts_by_each_key_with_ties_broken_by_id_and_numbers_before_strings() {
        let rows = rows();
        let q = |sort, descending| TableQuery { sort, descending, ..TableQuery::default() };
        assert_eq!(ids(&q(SortKey::Id, false).page(&rows)), ["4", "17", "30", "chat-12", "chat-7"]);
        assert_eq!(ids(&q(SortKey::Turns, true).page(&rows)), ["4", "17", "30", "chat-12", "chat-7"]);
        assert_eq!(ids(&q(SortKey::Id, true).page(&rows)), ["chat-7", "chat-12", "30", "17", "4"]);
        assert_eq!(ids(&q(SortKey::Turns, false).page(&rows)), ["chat-7", "chat-12", "30", "4", "17"]);
        assert_eq!(ids(&q(SortKey::StateBytes, true).page(&rows)), ["4", "17", "30", "chat-12", "chat-7"]);
        assert_eq!(ids(&q(SortKey::Idle, false).page(&rows)), ["30", "chat-7", "chat-12", "17", "4"]);
        assert_eq!(ids(&q(SortKey::Instance, false).page(&rows)), ["4", "17", "30", "chat-12", "chat-7"]);
    }

    #[test]
    fn pages_and_searches() {
        let rows = rows();
        let page = TableQuery { offset: 1, limit: 2, ..TableQuery::default() }.page(&rows);
        assert_eq!((page.total, page.matched, ids(&page)), (5, 5, vec!["17".to_string(), "30".to_string()]));
        let page = TableQuery { offset: 4, limit: 2, ..TableQuery::default() }.page(&rows);
        assert_eq!(ids(&page), ["chat-7"]);
        let page = TableQuery { offset: 5, limit: 2, ..TableQuery::default() }.page(&rows);
        assert!(page.rows.is_empty());
        let page = TableQuery { search: Some("chat".into()), ..TableQuery::default() }.page(&rows);
        assert_eq!((page.total, page.matched, ids(&page)), (5, 2, vec!["chat-12".into(), "chat-7".into()]));
        let page = TableQuery { search: Some("7".into()), sort: SortKey::Idle, ..TableQuery::default() }.page(&rows);
        assert_eq!(ids(&page), ["chat-7", "17"]);
        let page = TableQuery { limit: 0, ..TableQuery::default() }.page(&rows);
        assert!(page.rows.is_empty() && page.matched == 5);
    }

    #[test]
    fn a_partial_sort_gives_the_same_page_as_a_full_one() {
        let rows: Vec<Conversation> = (0..500u64)
            .map(|i| row(CorrelationId::U64(i * 7919 % 1000), Some((i % 3) as usize), i % 13, i % 17, i % 11))
            .collect();
        for sort in [SortKey::Id, SortKey::Instance, SortKey::Turns, SortKey::StateBytes, SortKey::Idle] {
            for descending in [false, true] {
                let all = TableQuery { sort, descending, limit: usize::MAX, ..TableQuery::default() }.page(&rows);
                for offset in [0, 37, 480] {
                    let q = TableQuery { sort, descending, search: None, offset, limit: 25 };
                    let page = q.page(&rows);
                    let want: Vec<_> = all.rows.iter().skip(offset).take(25).cloned().collect();
                    assert_eq!(page.rows, want, "{sort:?} {descending} {offset}");
                }
            }
        }
    }
}
