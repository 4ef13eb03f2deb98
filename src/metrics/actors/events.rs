//! `GET /v2/actors/events[?model=&version=]`: the tree as server-sent events, one `tree` event a
//! second (the first at once), each the JSON `GET /v2/actors` answers with the same filter. A
//! browser's `EventSource` reconnects by itself if the connection drops; the stream ends when the
//! client goes (the server drops it with the connection) or the metrics server stops.

use std::time::Duration;

use actix_web::web::{self, Bytes};
use serde_json::{json, Value};

use super::tree::Filter;
use super::ActorsState;

/// How often a tree event goes out.
pub const EVERY: Duration = Duration::from_secs(1);

/// One event in the text/event-stream format: a name and one line of JSON.
pub fn event(name: &str, data: &Value) -> Bytes {
    // serde_json writes no raw newline (they are escaped inside strings), so one `data:` line.
    Bytes::from(format!("event: {name}\ndata: {data}\n\n"))
}

/// The endless stream of tree events for `filter`; a model of the filter that is unloaded
/// meanwhile gives `refused` events (`{"error": ...}`) until it is back (not `error`: that
/// name is `EventSource`'s own, for a lost connection).
pub fn stream(
    state: web::Data<ActorsState>,
    filter: Filter,
) -> impl futures::Stream<Item = Result<Bytes, actix_web::Error>> {
    futures::stream::unfold((state, filter, true), |(state, filter, first)| async move {
        if !first {
            tokio::time::sleep(EVERY).await;
        }
        let bytes = match super::tree_json(&state, &filter) {
            Ok(tree) => event("tree", &tree),
            Err(e) => event("refused", &json!({ "error": e })),
        };
        Some((Ok(bytes), (state, filter, false)))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_event_is_its_name_and_one_data_line() {
        let e = event("tree", &json!({"models": [], "note": "a\nb"}));
        assert_eq!(
            &e[..],
            br#"event: tree
data: {"models":[],"note":"a\nb"}

"#
        );
    }
}
